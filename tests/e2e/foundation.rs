//! Foundation (issue 2): the launcher passes the program through unchanged, the exact heap
//! counters and the channel survive SIGKILL, errors are one line.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::fixture::{self, os, within};

const MB: f64 = 1e6;

/// Peak heap of `keep_array.py SIZE how` under mlprof.
fn keep_array_peak(py: &fixture::Python, size_mb: u32, how: &str) -> mlprof::model::Profile {
    let script = fixture::script("keep_array.py");
    let size = size_mb.to_string();
    fixture::profile(&[os(&py.exe), os(&script), os(&size), os(how)]).profile
}

/// Peak heap of the interpreter with numpy imported and nothing else (the baseline that
/// ground-truth sizes are added to).
pub fn baseline_peak(py: &fixture::Python) -> f64 {
    keep_array_peak(py, 0, "exit").memory.peak_heap_bytes as f64
}

#[test]
fn peak_heap_of_a_kept_numpy_array_is_exact() {
    for py in fixture::numpy_pythons() {
        // Baseline: the same script (numpy imported, one empty array) with size 0.
        let base = keep_array_peak(py, 0, "exit").memory.peak_heap_bytes as f64;
        let p = keep_array_peak(py, 300, "exit");
        let truth = base + 300.0 * MB;
        let got = p.memory.peak_heap_bytes as f64;
        assert!(
            within(got, truth, 0.02),
            "{}: peak {got} vs {truth} (base {base})",
            py.minor
        );
        assert_eq!(p.exit.code, Some(0));
        assert_eq!(
            p.processes[0]
                .python
                .as_deref()
                .map(|v| v.starts_with(&py.minor)),
            Some(true)
        );
        assert!(
            p.memory.peak_rss_bytes as f64 >= 300.0 * MB,
            "RSS includes the touched array"
        );
        assert!(!p.memory.timeline.is_empty());
    }
}

#[test]
fn sigkill_at_the_peak_still_gives_the_peak() {
    for py in fixture::numpy_pythons() {
        let base = keep_array_peak(py, 0, "exit").memory.peak_heap_bytes as f64;
        let run = {
            let script = fixture::script("keep_array.py");
            fixture::profile(&[os(&py.exe), os(&script), os("300"), os("kill")])
        };
        let p = &run.profile;
        assert_eq!(
            p.exit,
            mlprof::model::Exit {
                code: None,
                signal: Some(9)
            },
            "{}",
            py.minor
        );
        assert_eq!(run.output.status.code(), Some(128 + 9));
        let got = p.memory.peak_heap_bytes as f64;
        let truth = base + 300.0 * MB;
        assert!(
            within(got, truth, 0.02),
            "{}: peak {got} vs {truth}",
            py.minor
        );
        assert!(
            p.memory.peak_rss_bytes as f64 >= 300.0 * MB,
            "{}: RSS at death",
            py.minor
        );
    }
}

#[test]
fn exit_codes_and_signal_deaths_pass_through() {
    let script = fixture::script("signal_exit.py");
    for py in fixture::pythons() {
        let run = |args: &[&str]| {
            fixture::mlprof()
                .args(["run", "-q", "--"])
                .arg(&py.exe)
                .args(args)
                .status()
                .unwrap()
        };
        assert_eq!(run(&["-c", "pass"]).code(), Some(0), "{}", py.minor);
        assert_eq!(
            run(&["-c", "import sys; sys.exit(3)"]).code(),
            Some(3),
            "{}",
            py.minor
        );
        let script = script.to_str().unwrap();
        assert_eq!(
            run(&[script, "15"]).code(),
            Some(128 + 15),
            "{}: SIGTERM",
            py.minor
        );
        assert_eq!(
            run(&[script, "9"]).code(),
            Some(128 + 9),
            "{}: SIGKILL",
            py.minor
        );
    }
}

/// Run `stdio.py` directly or under mlprof, feeding stdin; return (stdout, stderr, code).
fn stdio_run(py: &fixture::Python, under: &[&str]) -> (Vec<u8>, Vec<u8>, Option<i32>) {
    let mut cmd = if under.is_empty() {
        Command::new(&py.exe)
    } else {
        let mut c = fixture::mlprof();
        c.args(under).arg("--").arg(&py.exe);
        c
    };
    let mut child = cmd
        .arg(fixture::script("stdio.py"))
        .arg("7")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"abc\x01\n").unwrap();
    let out = child.wait_with_output().unwrap();
    (out.stdout, out.stderr, out.status.code())
}

#[test]
fn stdin_stdout_stderr_and_exit_code_are_unchanged() {
    let dir = fixture::tempdir();
    let out = dir.join("p.json");
    for py in fixture::pythons() {
        let direct = stdio_run(py, &[]);
        let profiled = stdio_run(py, &["run", "-o", out.to_str().unwrap()]);
        assert_eq!(direct, profiled, "{}", py.minor);
        assert_eq!(direct.2, Some(7));
        assert!(direct.0.starts_with(b"in:abc\x01\n\x00\xff\n"));
    }
}

#[test]
fn json_to_stdout_moves_the_programs_stdout_to_stderr() {
    let py = &fixture::pythons()[0];
    let (stdout, stderr, code) = stdio_run(py, &["run", "--json"]);
    assert_eq!(code, Some(7));
    let profile = fixture::check_profile(std::str::from_utf8(&stdout).unwrap());
    assert_eq!(profile.exit.code, Some(7));
    assert!(
        stderr.starts_with(b"in:abc\x01\n\x00\xff\n"),
        "program stdout went to stderr"
    );
}

/// Prints `LD_PRELOAD`, then the file names of the libraries mapped into the process.
const LOADED_LIBS: &str = "import os; x = bytearray(10**7); print(os.environ['LD_PRELOAD']); \
    print('\\n'.join(sorted({l.split()[-1].rsplit('/', 1)[-1] \
    for l in open('/proc/self/maps') if '.so' in l})))";

#[test]
fn an_existing_ld_preload_library_still_loads() {
    let dir = fixture::tempdir();
    let lib = dir.join("libmarker.so");
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(fixture::root().join("tests/native/marker_preload.c"))
        .status()
        .expect("cc is needed to build the test library");
    assert!(cc.success());
    let marker = dir.join("marker");
    let py = &fixture::pythons()[0];
    let out = dir.join("p.json");
    let status = fixture::mlprof()
        .args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&py.exe)
        .args(["-c", LOADED_LIBS])
        .env("LD_PRELOAD", &lib)
        .env("MARKER_FILE", &marker)
        .output()
        .unwrap();
    assert!(status.status.success());
    assert!(std::fs::read_to_string(&marker)
        .unwrap()
        .contains("loaded\n"));
    let printed = String::from_utf8(status.stdout).unwrap();
    assert!(
        printed.starts_with(lib.to_str().unwrap()),
        "user's library first: {printed}"
    );
    assert!(printed.contains("libmarker.so\n"), "{printed}");
    assert!(
        printed.lines().any(|l| {
            let name = l.rsplit('/').next().unwrap_or(l);
            name.starts_with("libmlprof_preload") && name.ends_with(".so")
        }),
        "ours after it: {printed}"
    );
    let profile = fixture::check_profile(&std::fs::read_to_string(&out).unwrap());
    assert!(
        profile.memory.peak_heap_bytes >= 10_000_000,
        "our library loaded too"
    );
}

#[test]
fn a_forked_child_gets_its_own_channel() {
    for py in fixture::pythons() {
        let script = fixture::script("forks.py");
        let p = fixture::profile(&[os(&py.exe), os(&script), os("40"), os("20")]).profile;
        assert_eq!(p.processes.len(), 2, "{}: {:?}", py.minor, p.processes);
        let parent = &p.processes[0];
        let child = p
            .processes
            .iter()
            .find(|c| c.forked)
            .expect("a forked child");
        assert_eq!(child.ppid, parent.pid);
        assert_eq!(
            child.exit.code,
            Some(5),
            "{}: exit through os._exit recorded",
            py.minor
        );
        // The child inherits the parent's heap, then adds 40 MB; the parent adds 20 MB.
        let child_growth = child.peak_heap_bytes as f64 - 40.0 * MB;
        let parent_peak = parent.peak_heap_bytes as f64;
        let why = format!(
            "{}: child grew {child_growth}, parent peak {parent_peak}",
            py.minor
        );
        assert!(child_growth > 0.0 && child_growth < parent_peak, "{why}");
        assert!(within(
            parent.peak_heap_bytes as f64,
            20.0 * MB + child_growth,
            0.3
        ));
    }
}

#[test]
fn errors_are_one_line_with_the_right_exit_code() {
    let out = fixture::mlprof()
        .args(["run", "--", "no-such-program-xyz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "mlprof: cannot run 'no-such-program-xyz': No such file or directory\n"
    );
    let out = fixture::mlprof().arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: mlprof run"));

    let dir = fixture::tempdir();
    let py = &fixture::pythons()[0];
    let good = dir.join("good.json");
    let status = fixture::mlprof()
        .args(["run", "-o"])
        .arg(&good)
        .args(["--"])
        .arg(&py.exe)
        .args(["-c", "pass"])
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&good).unwrap();
    let truncated = dir.join("truncated.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, b"\x7fELF\x02\x01").unwrap();
    for bad in [truncated, garbage, dir.join("missing.json")] {
        let out = fixture::mlprof().arg("report").arg(&bad).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with(&format!("mlprof: {}: ", bad.display())),
            "{err}"
        );
    }
    let out = fixture::mlprof().arg("report").arg(&good).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("peak heap"));
}

#[test]
fn a_static_program_is_measured_by_rss_with_a_warning() {
    let dir = fixture::tempdir();
    let exe = dir.join("static_hello");
    let cc = Command::new("cc")
        .args(["-static", "-o"])
        .arg(&exe)
        .arg(fixture::root().join("tests/native/static_hello.c"))
        .status()
        .expect("cc is needed to build the static test program");
    assert!(cc.success());
    let run = fixture::profile(&[os(&exe)]);
    assert_eq!(run.output.stdout, b"static hello\n");
    assert!(
        String::from_utf8_lossy(&run.output.stderr).contains("only RSS and CPU time were measured")
    );
    assert!(!run.profile.processes[0].instrumented);
}

#[test]
fn sigterm_sent_to_mlprof_reaches_the_program() {
    let py = &fixture::pythons()[0];
    let mut child = fixture::mlprof()
        .args(["run", "-q", "--"])
        .arg(&py.exe)
        .arg(fixture::script("signal_exit.py"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(
        child.wait().unwrap().code(),
        Some(42),
        "the program's handler ran"
    );
}

#[test]
fn the_documented_schema_rejects_damaged_profiles() {
    let py = &fixture::pythons()[0];
    let run = fixture::profile(&[os(&py.exe), os("-c"), os("x = bytearray(10**6)")]);
    let mut value = serde_json::to_value(&run.profile).unwrap();
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture::root().join("docs/profile-schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&value));
    value["memory"]["peak_heap_bytes"] = serde_json::json!(-1);
    assert!(!validator.is_valid(&value));
    value.as_object_mut().unwrap().remove("memory");
    assert!(!validator.is_valid(&value));
}
