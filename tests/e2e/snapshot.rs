//! Reports during the run: `--snapshot-every SECONDS` and `--snapshot-on-signal` write the
//! profile so far to the `-o` file while the program runs. Every snapshot seen must be a whole,
//! valid profile (schema and invariants), marked as a snapshot of a program still running; the
//! report at the end replaces the last one. The issue's bar ("`--snapshot-every 5` on a 30 s
//! run leaves a valid profile at every interval") is covered faster by 1 s intervals on an 8 s
//! run, read every 200 ms.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use mlprof::model::Profile;

use crate::fixture::{self, os, pythons};

/// `mlprof run OPTIONS -- python snapshot_phases.py SECONDS [REPORT]`, stdout piped (the
/// program's).
fn start(options: &[&std::ffi::OsStr], args: &[&std::ffi::OsStr]) -> Child {
    fixture::mlprof()
        .arg("run")
        .args(options)
        .arg("--")
        .arg(&pythons()[0].exe)
        .arg(fixture::script("snapshot_phases.py"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mlprof")
}

/// The profile at `path` if there is one: read whole and checked (schema, invariants).
fn read(path: &Path) -> Option<Profile> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(fixture::check_profile(&text))
}

/// Whether `p` is a snapshot of a program still running: exit unknown, the launched process
/// marked running, and the first warning saying so.
fn is_snapshot(p: &Profile) -> bool {
    let first = p.warnings.first().map_or("", String::as_str);
    p.exit.code.is_none()
        && p.exit.signal.is_none()
        && first.starts_with("snapshot at ")
        && first.contains("the program was still running")
}

fn assert_snapshot(p: &Profile) {
    assert!(is_snapshot(p), "not marked as a snapshot: {:?}", p.warnings);
    assert!(
        p.processes.iter().any(|proc| proc.still_running),
        "the running program is not marked running: {:?}",
        p.processes
    );
}

/// The final report: the program's exit and no snapshot warning.
fn assert_final(p: &Profile) {
    assert_eq!(p.exit.code, Some(0), "{:?}", p.warnings);
    assert!(
        !p.warnings.iter().any(|w| w.starts_with("snapshot at")),
        "{:?}",
        p.warnings
    );
    assert!(p.processes.iter().all(|proc| !proc.still_running));
}

#[test]
fn snapshots_every_second_are_whole_profiles_and_the_final_report_replaces_them() {
    let dir = fixture::tempdir();
    let out = dir.join("p.json");
    // The program runs 8 s, and on (idle) until it has seen 4 snapshots: on a machine busier
    // than its cores the snapshot thread (nice 10) gets its CPU late.
    let mut child = start(
        &[os("--snapshot-every"), os("1"), os("-o"), os(&out)],
        &[os("8"), os(&out)],
    );
    let started = Instant::now();
    // (wall_s, peak heap) of each distinct snapshot, in the order seen.
    let mut seen: Vec<(f64, u64)> = Vec::new();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "mlprof did not end"
        );
        if let Some(p) = read(&out) {
            if p.exit.code.is_none() {
                assert_snapshot(&p);
                if seen.last().is_none_or(|&(wall, _)| wall != p.wall_s) {
                    seen.push((p.wall_s, p.memory.peak_heap_bytes));
                }
            } else {
                assert_final(&p); // written while mlprof was finishing
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stderr = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).into_owned();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("snapshot not written"), "{stderr}");
    assert!(
        seen.len() >= 4,
        "at least 4 distinct snapshots during a run of 8 s or more with 1 s intervals: {seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "snapshots later in time, peak heap never lower: {seen:?}"
    );
    // The program keeps 4 MiB more each half second: later snapshots hold more.
    let (first, last) = (seen[0].1, seen[seen.len() - 1].1);
    assert!(
        last >= first + 8 * 1024 * 1024,
        "snapshots follow the run: {seen:?}"
    );
    let last_wall = seen[seen.len() - 1].0;
    let report = read(&out).expect("the final report");
    assert_final(&report);
    assert!(report.wall_s > last_wall && report.memory.peak_heap_bytes >= last);
    assert!(report.memory.peak_heap_bytes >= 64 * 1024 * 1024);
    assert_eq!(
        fixture::dir_entries(&dir),
        ["p.json"],
        "no temporary file left"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Read the program's `ready` line (its SIGUSR1 handler is installed).
fn wait_ready(child: &mut Child) -> BufReader<std::process::ChildStdout> {
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    stdout
}

fn usr1(child: &Child) {
    // SAFETY: sending SIGUSR1 to our own child process (mlprof).
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) }, 0);
}

/// The rest of the program's stdout, once mlprof has ended, and mlprof's status.
fn finish(mut child: Child, mut stdout: BufReader<std::process::ChildStdout>) -> (String, i32) {
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let status = child.wait().unwrap();
    (rest, status.code().unwrap_or(-1))
}

#[test]
fn sigusr1_to_mlprof_writes_a_snapshot_only_with_snapshot_on_signal() {
    let dir = fixture::tempdir();
    let out = dir.join("p.json");

    // With the flag: a snapshot now, and the program never gets the signal.
    let mut child = start(
        &[os("--snapshot-on-signal"), os("-o"), os(&out)],
        &[os("5")],
    );
    let stdout = wait_ready(&mut child);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!out.exists(), "no snapshot before one is asked for");
    let asked = Instant::now();
    usr1(&child);
    let snapshot = loop {
        if let Some(p) = read(&out) {
            break p;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(3),
            "no snapshot 3 s after SIGUSR1"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_snapshot(&snapshot);
    assert!(child.try_wait().unwrap().is_none(), "the program runs on");
    usr1(&child); // a second one is a second snapshot, not a reason to stop
    let (rest, code) = finish(child, stdout);
    assert_eq!(code, 0);
    assert_eq!(rest, "usr1: 0\n", "SIGUSR1 was not passed on");
    assert_final(&read(&out).unwrap());

    // Without it: passed on to the program as before, and no snapshot.
    std::fs::remove_file(&out).unwrap();
    let mut child = start(&[os("-o"), os(&out)], &[os("3")]);
    let stdout = wait_ready(&mut child);
    usr1(&child);
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!out.exists(), "SIGUSR1 wrote a snapshot without the flag");
    let (rest, code) = finish(child, stdout);
    assert_eq!(code, 0);
    assert_eq!(rest, "usr1: 1\n", "SIGUSR1 reached the program once");
    assert_final(&read(&out).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn snapshots_need_a_report_file_that_can_be_replaced_atomically() {
    let dir = fixture::tempdir();
    let marker = dir.join("ran");
    let program = [
        os(&pythons()[0].exe),
        os("-c"),
        os("import sys; open(sys.argv[1], 'w')"),
        os(&marker),
    ];
    let cases: [(&[&str], &str); 4] = [
        (
            &["--snapshot-every", "5"],
            "mlprof: --snapshot-every needs -o FILE: snapshots are written to the report file\n",
        ),
        (
            &["--snapshot-on-signal", "--json"],
            "mlprof: --snapshot-on-signal needs -o FILE: snapshots are written to the report \
             file\n",
        ),
        (
            &["--snapshot-every", "5", "-o", "/dev/stdout"],
            "mlprof: --snapshot-every: /dev/stdout cannot be replaced atomically (a device, \
             FIFO or link, or a directory mlprof may not add files to), so a snapshot could be \
             read half-written; name a regular file\n",
        ),
        (&["--snapshot-every", "0", "-o", "p.json"], ""),
    ];
    for (options, expected) in cases {
        let out = fixture::mlprof()
            .arg("run")
            .args(options)
            .arg("--")
            .args(program)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{options:?}: {stderr}");
        if expected.is_empty() {
            assert!(
                stderr.contains("'0' is not a number of seconds from 0.1 to 86400"),
                "{stderr}"
            );
        } else {
            assert_eq!(stderr, expected, "{options:?}");
        }
        assert!(!marker.exists(), "{options:?}: the program must not run");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn snapshots_carry_the_gpu_polls_so_far() {
    let dir = fixture::tempdir();
    // The fake NVML library (as in gpu.rs): the program uses 1 GiB at 50% from the start.
    let lib = dir.join("libfake-nvml.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let built = std::process::Command::new(cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(fixture::root().join("tests/fake-nvml/fake_nvml.c"))
        .status()
        .expect("a C compiler (cc)");
    assert!(built.success(), "the fake NVML library compiles");
    let script = dir.join("fake.nvml");
    std::fs::write(
        &script,
        "device Fake-H100 85899345920\nrow t0 0 50 1073741824 child:1073741824:50\n",
    )
    .unwrap();
    let out = dir.join("p.json");
    let mut child = fixture::mlprof()
        .args([
            "run",
            "--snapshot-every",
            "0.5",
            "--gpu-rate",
            "20",
            "--gpu-lib",
        ])
        .arg(&lib)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&pythons()[0].exe)
        .arg(fixture::script("snapshot_phases.py"))
        .arg("4")
        .env("MLPROF_FAKE_NVML_SCRIPT", &script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut with_gpu = None;
    while child.try_wait().unwrap().is_none() {
        if let Some(p) = read(&out).filter(|p| is_snapshot(p) && p.gpu.available) {
            with_gpu = Some(p);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let p = with_gpu.expect("a snapshot with the GPU polls");
    assert_eq!(p.gpu.devices[0].name, "Fake-H100");
    assert_eq!(p.gpu.peak_memory_bytes, 1 << 30, "{:?}", p.gpu);
    assert!(!p.gpu.timeline.is_empty());
    let report = read(&out).unwrap();
    assert_final(&report);
    assert_eq!(report.gpu.peak_memory_bytes, 1 << 30);
    assert!(report.gpu.timeline.len() > p.gpu.timeline.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn snapshots_carry_the_tensors_of_processes_that_ended_and_say_who_still_records() {
    // The stand-in for PyTorch's CUDA allocator (as in gpu_tensors.rs): the program holds
    // 4 MiB at @parent while a child it ran held 8 MiB at @child and ended.
    const SCRIPT: &str = "gpu_tensor_snapshot.py";
    const MIB: u64 = 1 << 20;
    let dir = fixture::tempdir();
    let out = dir.join("p.json");
    let mut child = fixture::mlprof()
        .args(["run", "--snapshot-every", "0.5", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&pythons()[0].exe)
        .arg(fixture::script(SCRIPT))
        .arg(&out)
        .env("PYTHONPATH", fixture::root().join("tests/fake-torch"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let m = crate::cpu::markers(SCRIPT);
    let file = fixture::script(SCRIPT).to_string_lossy().into_owned();
    let at = |p: &Profile, name: &str| -> u64 {
        p.lines
            .iter()
            .filter(|l| l.file == file && l.line == m[name])
            .map(|l| l.measures.gpu_tensor_peak_bytes)
            .sum()
    };
    let state = |p: &Profile, pid: u32| {
        p.processes
            .iter()
            .find(|q| q.pid == pid)
            .and_then(|q| q.gpu_tensors.as_ref())
            .map(|t| (t.state.clone(), t.note.clone()))
    };
    // Snapshots of the program still running, read as they come.
    let mut found = None;
    while child.try_wait().unwrap().is_none() {
        if let Some(p) = read(&out).filter(|p| is_snapshot(p) && at(p, "child") > 0) {
            found = Some(p);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(stdout.contains("snapshots seen: 4"), "{stdout}");
    let pid_of_child: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    let p = found.expect("a snapshot after the child ended has its tensors");
    assert_snapshot(&p);
    // The child's trace was read: its line holds its 8 MiB.
    assert_eq!(at(&p, "child"), 8 * MIB);
    assert_eq!(
        state(&p, pid_of_child).unwrap(),
        ("on".into(), String::new())
    );
    // The program's own is still recording, said so, and none of its figures are made up.
    let launched = p.processes[0].pid;
    let (s, note) = state(&p, launched).expect("the program's allocator was traced");
    assert_eq!(s, "recording", "{note}");
    assert!(note.contains("still running"), "{note}");
    assert_eq!(at(&p, "parent"), 0);
    // The final report has both.
    let report = read(&out).unwrap();
    assert_final(&report);
    assert_eq!(state(&report, launched).unwrap().0, "on");
    assert_eq!(
        (at(&report, "parent"), at(&report, "child")),
        (4 * MIB, 8 * MIB)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
