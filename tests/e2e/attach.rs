//! `mlprof attach PID` (issue 17): a running CPython profiled from outside, on every CPython;
//! the program is not harmed (it exits 0 with its normal output); each way attaching can fail
//! is one line and a non-zero status.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::cpu::markers;
use crate::fixture::{self, within};

/// Start `spin_line.py` for `seconds` and wait until it spins.
fn spinner(
    python: &std::path::Path,
    seconds: &str,
) -> (Child, BufReader<std::process::ChildStdout>) {
    started(python, "spin_line.py", seconds)
}

/// Start a script that prints `ready` once it runs, and wait for that.
fn started(
    python: &std::path::Path,
    script: &str,
    seconds: &str,
) -> (Child, BufReader<std::process::ChildStdout>) {
    started_with(python, script, seconds, &[])
}

/// `started` with extra environment for the script.
pub fn started_with(
    python: &std::path::Path,
    script: &str,
    seconds: &str,
    env: &[(&str, &str)],
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(python)
        .arg(fixture::script(script))
        .arg(seconds)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, out)
}

fn attach(args: &[&str]) -> Output {
    fixture::mlprof().arg("attach").args(args).output().unwrap()
}

/// `mlprof attach PID --duration SECONDS -o FILE`, which must succeed: the profile.
pub fn attached(pid: u32, seconds: &str) -> mlprof::model::Profile {
    let dir = fixture::tempdir();
    let path = dir.join("attach.json");
    let run = attach(&[
        &pid.to_string(),
        "--duration",
        seconds,
        "-o",
        path.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    p
}

fn one_line_error(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("mlprof: ") && stderr.contains(expected),
        "{stderr}"
    );
}

#[test]
fn a_spinning_line_gets_the_cpu_as_python_and_the_program_runs_on() {
    let spin = markers("spin_line.py")["spin"];
    for py in fixture::every_build() {
        let (mut child, mut out) = spinner(&py.exe, "8");
        let p = attached(child.id(), "3");
        assert!(p.attached);
        let total: f64 = p
            .lines
            .iter()
            .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
            .sum();
        let line = crate::cpu::line(&p, "spin_line.py", spin);
        let m = &line.measures;
        let on_line = m.cpu_python_s + m.cpu_native_s;
        // The CPU the kernel counted for it over the attach: a spinning thread on a busy
        // machine gets a share of a CPU, and the profile says what it got.
        let used = p.cpu_user_s + p.cpu_kernel_s;
        assert!(used > 0.3, "CPython {}: it ran {used} s", py.minor);
        assert!(
            within(total, used, 0.1),
            "CPython {}: {total} s sampled, {used} s used",
            py.minor
        );
        assert!(
            on_line >= 0.9 * total,
            "CPython {}: {on_line} of {total} s on the spin line",
            py.minor
        );
        assert!(
            m.cpu_python_s >= 0.95 * on_line,
            "CPython {}: Python {} of {on_line} s",
            py.minor,
            m.cpu_python_s
        );
        assert!(p.memory.peak_rss_bytes > 0);
        let status = child.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        assert!(status.success(), "CPython {}: {status:?}", py.minor);
        assert_eq!(rest, "done True\n", "CPython {}", py.minor);
    }
}

/// Threads are told apart on every CPython (before 3.11 through glibc's thread descriptors):
/// the worker's line gets the CPU, the main thread's `join` the waiting.
#[test]
fn a_worker_thread_runs_while_the_main_thread_waits() {
    let m = markers("attach_threads.py");
    for py in fixture::pythons() {
        let (mut child, _out) = started(&py.exe, "attach_threads.py", "5");
        let p = attached(child.id(), "2");
        let worker = &crate::cpu::line(&p, "attach_threads.py", m["worker"]).measures;
        let join = &crate::cpu::line(&p, "attach_threads.py", m["join"]).measures;
        let used = p.cpu_user_s + p.cpu_kernel_s;
        assert!(
            used > 0.2 && worker.cpu_python_s >= 0.9 * used,
            "CPython {}: the process used {used} s; worker line {worker:?}",
            py.minor
        );
        assert!(
            join.waiting_s > 1.5 && join.cpu_python_s + join.cpu_native_s < 0.2,
            "CPython {}: join line {join:?}",
            py.minor
        );
        assert_eq!(
            p.threads.iter().filter(|t| t.python).count(),
            2,
            "{:?}",
            p.threads
        );
        assert!(child.wait().unwrap().success());
    }
}

#[test]
fn ctrl_c_ends_the_attach_with_a_report() {
    let py = &fixture::pythons()[0];
    let (mut child, _out) = spinner(&py.exe, "6");
    let dir = fixture::tempdir();
    let path = dir.join("attach.json");
    let mut mlprof = fixture::mlprof()
        .args([
            "attach",
            &child.id().to_string(),
            "-o",
            path.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) on a child we started.
    unsafe { libc::kill(mlprof.id() as libc::pid_t, libc::SIGINT) };
    let status = mlprof.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    assert!(p.wall_s > 1.0 && p.wall_s < 4.0, "{}", p.wall_s);
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_way_attaching_fails_is_one_line() {
    one_line_error(
        &attach(&["4194303", "--duration", "1"]),
        "no such process: 4194303",
    );
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    one_line_error(
        &attach(&[&sleeper.id().to_string(), "--duration", "1"]),
        "is not a CPython interpreter",
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn a_rate_above_the_most_is_clamped_as_run_clamps_it() {
    let python = &fixture::pythons()[0];
    let (mut child, _out) = spinner(&python.exe, "20");
    let dir = fixture::tempdir();
    let path = dir.join("attach.json");
    let run = attach(&[
        &child.id().to_string(),
        "--duration",
        "1",
        "--rate",
        "1000000",
        "-o",
        path.to_str().unwrap(),
    ]);
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("using 10000"), "{stderr}");
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    // One look every 100 us at most (it was every microsecond: /proc read in a busy loop).
    assert!(
        p.sample_interval_s >= 1e-4 * 0.999,
        "{}",
        p.sample_interval_s
    );
}

/// As another user, without CAP_SYS_PTRACE: the kernel refuses the reads.
#[test]
fn attaching_without_the_right_to_ptrace_names_what_is_needed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--help").output().is_err() {
        crate::fixture::skipped("skipped: needs root and setpriv to run mlprof as another user");
        return;
    }
    let py = &fixture::pythons()[0];
    let (mut child, _out) = spinner(&py.exe, "4");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_mlprof"))
        .args(["attach", &child.id().to_string(), "--duration", "1"])
        .output()
        .unwrap();
    if String::from_utf8_lossy(&out.stderr).starts_with("setpriv:") {
        crate::fixture::skipped(&format!(
            "skipped: setpriv could not switch users here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    one_line_error(&out, "CAP_SYS_PTRACE");
    let _ = child.kill();
    let _ = child.wait();
}

/// Processes spinning `while 1: pass` beside a test's target, to load the machine; killed when
/// dropped.
struct Busy(Vec<Child>);

impl Busy {
    fn start(python: &std::path::Path, n: usize) -> Busy {
        Busy(
            (0..n)
                .map(|_| {
                    Command::new(python)
                        .args(["-c", "while 1: pass"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// The kernel's own count of the CPU `pid` used so far: utime + stime of `/proc/PID/stat`
/// (seconds).
fn kernel_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    // After the name, field 3 (state) is index 0: utime (14) and stime (15) are 11 and 12.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / clock_ticks_per_s()
}

/// Whether `pid`'s main thread is in `clock_nanosleep` (`/proc/PID/syscall`): mlprof attach's
/// is first between its looks, after its start-up (which reads files and never sleeps).
fn between_looks(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .is_ok_and(|s| s.split_whitespace().next() == Some(&libc::SYS_clock_nanosleep.to_string()))
}

/// Issue "Trust on a busy, hostile machine", item 5: eight threads hashing with the GIL
/// released, beside four busy processes, on a machine with fewer CPUs than that: each thread
/// is runnable all the time but runs a fraction of it. The profile's CPU is the CPU the kernel
/// counted for the process over the attach, not the wall time of runnable threads.
///
/// The window edges are closed by construction: the threads start hashing only once mlprof is
/// sampling (its main thread between looks) and the kernel's count has been read, and the
/// process is stopped (SIGSTOP) before the count is read again and mlprof is stopped (SIGINT,
/// as Ctrl-C): outside the test's two reads it uses no CPU for mlprof to see or miss.
#[test]
fn attached_cpu_adds_up_to_what_the_kernel_counted_on_a_busy_machine() {
    let py = &fixture::pythons()[0];
    let _busy = Busy::start(&py.exe, 4);
    let mut child = Command::new(&py.exe)
        .arg(fixture::script("attach_hashing.py"))
        .arg("60")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let dir = fixture::tempdir();
    let path = dir.join("attach.json");
    let mut mlprof = fixture::mlprof()
        .args(["attach", &pid.to_string(), "-o", path.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while !between_looks(mlprof.id()) {
        assert!(
            waited.elapsed() < Duration::from_secs(120),
            "mlprof never started sampling"
        );
        assert!(mlprof.try_wait().unwrap().is_none(), "mlprof ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = kernel_cpu_s(pid);
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
    drop(stdin);
    std::thread::sleep(Duration::from_secs(5));
    // SAFETY: kill(2) on children we started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    // A stopped process's threads show `T` once the signal is taken.
    let stopped = std::time::Instant::now();
    while std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .any(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .is_ok_and(|s| s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('R'))
        })
    {
        assert!(stopped.elapsed() < Duration::from_secs(10), "not stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = kernel_cpu_s(pid);
    // SAFETY: as above.
    unsafe { libc::kill(mlprof.id() as libc::pid_t, libc::SIGINT) };
    let done = mlprof.wait_with_output().unwrap();
    let _ = child.kill();
    // SAFETY: as above: a killed process must run on to end.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{stderr}");
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    let kernel = after - before;
    let profiled: f64 = p
        .threads
        .iter()
        .map(|t| t.cpu_python_s + t.cpu_native_s)
        .sum();
    // The granularity of the kernel's count: utime + stime are whole clock ticks (two reads).
    // No sampling error: each thread's samples add up its own CPU clock's steps (exact while it
    // does not run, as before the hashing and once stopped), and the process ran only between
    // the two reads. 10 ms more for a thread running at a look (its clock lags by at most one
    // scheduler tick, 10 ms at HZ 100, the coarsest).
    let grain = 2.0 / clock_ticks_per_s() + 0.010;
    eprintln!(
        "CPython {}: profile {profiled:.3} s of CPU, kernel utime+stime {kernel:.3} s in the \
         5 s of hashing (attach {:.2} s, grain {grain:.3} s); profile / kernel = {:.3}",
        py.minor,
        p.wall_s,
        profiled / kernel
    );
    assert!(
        kernel > 1.0,
        "the target ran {kernel:.2} s: too little to tell"
    );
    assert!(
        (profiled - kernel).abs() <= grain,
        "the profile counts {profiled:.3} s of CPU, the kernel {kernel:.3} s"
    );
    assert!(
        (profiled - kernel).abs() <= 0.10 * kernel,
        "the profile counts {profiled:.3} s of CPU, the kernel {kernel:.3} s: off by more \
         than 10%"
    );
}

/// Whether perf events on a thread's CPU clock (user space only, as mlprof opens them) are
/// allowed here: tried on this thread.
fn perf_events_here() -> bool {
    let mut attr = [0u8; 112];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&112u32.to_ne_bytes()); // its size
    attr[8..16].copy_from_slice(&1u64.to_ne_bytes()); // PERF_COUNT_SW_TASK_CLOCK
    attr[40..48].copy_from_slice(&(1u64 << 5 | 1 << 6).to_ne_bytes()); // exclude kernel, hv
                                                                       // SAFETY: perf_event_open reads the 112 bytes of `attr`, whose size field says so.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            0 as libc::c_ulong,
        )
    };
    if fd >= 0 {
        // SAFETY: closing the descriptor just opened, once.
        unsafe { libc::close(fd as libc::c_int) };
    }
    fd >= 0
}

/// Issue "Trust on a busy, hostile machine", item 6: a target starting short-lived threads
/// without a pause, attached under an open-files limit of 64. Threads that exit must not turn
/// sampling off nor leave their descriptors open, and running out of descriptors is not the
/// process ending: every 3 s of the attach has samples, and no "ended meanwhile".
#[test]
fn threads_that_come_and_go_under_a_low_open_files_limit_are_sampled_throughout() {
    let py = &fixture::pythons()[0];
    let (mut child, _out) = started(&py.exe, "attach_churn.py", "60");
    let dir = fixture::tempdir();
    let path = dir.join("attach.json");
    let run = Command::new("sh")
        .args(["-c", "ulimit -n 64 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_mlprof"))
        .args(["attach", &child.id().to_string(), "--duration", "9", "-o"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map_or("?".to_string(), |s| s.trim().to_string());
    let perf = perf_events_here();
    eprintln!(
        "path exercised: {} (kernel.perf_event_paranoid {paranoid}); warnings: {:#?}",
        match perf {
            true => "perf events on the threads that run, closed as they end, within 64 files",
            false => "no perf events here: running time from the kernel's clocks only",
        },
        p.warnings
    );
    // Where this process may have perf events, so may mlprof: a thread that ended before its
    // event was opened, or the descriptors running out, must not turn them off.
    if perf {
        assert!(
            !p.warnings.iter().any(|w| w.contains("not told apart")),
            "perf events turned off: {:?}",
            p.warnings
        );
    }
    assert!(
        !p.warnings.iter().any(|w| w.contains("ended meanwhile")) && !stderr.contains("ended"),
        "the process did not end: {stderr}"
    );
    assert!(p.wall_s >= 8.5, "attached {} s of 9", p.wall_s);
    for window in 0..3 {
        let (from, to) = (3.0 * window as f64, 3.0 * (window + 1) as f64);
        let sampled: Vec<f64> = p
            .samples
            .iter()
            .filter(|s| s.t_s >= from && s.t_s < to && s.cpu_s > 0.0)
            .map(|s| s.cpu_s)
            .collect();
        let cpu: f64 = sampled.iter().sum();
        eprintln!(
            "{from} s to {to} s: {} samples, {cpu:.3} s of CPU",
            sampled.len()
        );
        assert!(
            cpu > 0.0,
            "no CPU sampled from {from} s to {to} s; warnings: {:?}",
            p.warnings
        );
    }
}

/// What the interpreter's library file becomes once the target has mapped it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Swap {
    /// Left as it is.
    Keep,
    /// Another copy of the same library: the same bytes, not the inode mapped.
    Copy,
    /// A FIFO no one writes: opening it for reading waits for a writer forever.
    Fifo,
    /// A sparse 3 GiB file: reading it whole takes 3 GiB of memory.
    Sparse,
}

/// How an attach ended: its status and one-line error, its peak RSS (KiB), the profile.
struct Ended {
    code: Option<i32>,
    stderr: String,
    peak_rss_kib: i64,
    profile: Option<mlprof::model::Profile>,
}

/// `setpriv` arguments that run a command as this user without capabilities (root without
/// CAP_SYS_ADMIN may not open `/proc/PID/map_files`, as any other user).
const NO_CAPS: [&str; 2] = ["--bounding-set=-all", "--inh-caps=-all"];

/// `mlprof attach PID --duration 1`, given `limit` to end (a blocked attach is killed and the
/// test fails), run by `python` through `peak_rss.py` for its peak RSS.
fn attach_within(python: &std::path::Path, pid: u32, without_caps: bool, limit: Duration) -> Ended {
    let dir = fixture::tempdir();
    let path = dir.join("attach.json");
    let mut cmd = Command::new(python);
    cmd.arg(fixture::script("peak_rss.py"))
        .arg(limit.as_secs().to_string());
    if without_caps {
        cmd.arg("setpriv").args(NO_CAPS);
    }
    let out = cmd
        .arg(env!("CARGO_BIN_EXE_mlprof"))
        .args(["attach", &pid.to_string(), "--duration", "1", "-o"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut fields = stdout.split_whitespace();
    let status = fields.next().unwrap_or_default();
    assert_ne!(
        status, "timeout",
        "mlprof attach did not end within {limit:?} (blocked?): {stderr}"
    );
    let code: i32 = status.parse().expect(&stdout);
    let peak_rss_kib = fields.next().and_then(|f| f.parse().ok()).expect(&stdout);
    let profile =
        (code == 0).then(|| fixture::check_profile(&std::fs::read_to_string(&path).unwrap()));
    let _ = std::fs::remove_dir_all(&dir);
    Ended {
        code: Some(code),
        stderr,
        peak_rss_kib,
        profile,
    }
}

/// A spinning CPython whose libpython is a copy in a directory of the test's, swapped by
/// `swap` once mapped; `None` where the interpreter has no libpython beside it to copy.
fn relocated_spinner(
    py: &fixture::Python,
    swap: Swap,
    without_caps: bool,
) -> Option<(
    Child,
    BufReader<std::process::ChildStdout>,
    std::path::PathBuf,
)> {
    let name = format!("libpython{}.so.1.0", py.minor);
    let lib = py.exe.parent()?.parent()?.join("lib").join(&name);
    if !lib.exists() {
        return None;
    }
    let dir = fixture::tempdir();
    let copy = dir.join(&name);
    std::fs::copy(&lib, &copy).unwrap();
    let mut cmd = match without_caps {
        true => {
            let mut c = Command::new("setpriv");
            c.args(NO_CAPS).arg(&py.exe);
            c
        }
        false => Command::new(&py.exe),
    };
    let mut child = cmd
        .arg(fixture::script("spin_line.py"))
        .arg("120")
        .env("LD_LIBRARY_PATH", &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
    if !maps.contains(copy.to_str().unwrap()) {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    match swap {
        Swap::Keep => {}
        Swap::Copy => {
            std::fs::remove_file(&copy).unwrap();
            std::fs::copy(&lib, &copy).unwrap();
        }
        Swap::Fifo => {
            std::fs::remove_file(&copy).unwrap();
            let c = std::ffi::CString::new(copy.to_str().unwrap()).unwrap();
            // SAFETY: mkfifo with a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        }
        Swap::Sparse => {
            std::fs::remove_file(&copy).unwrap();
            let f = std::fs::File::create(&copy).unwrap();
            f.set_len(3 << 30).unwrap();
        }
    }
    Some((child, out, dir))
}

/// Issue "Trust on a busy, hostile machine", item 7: the library the interpreter was loaded
/// from is replaced once mapped, by a FIFO, a sparse 3 GiB file or another copy. mlprof
/// reads the interpreter through the mapping's own inode where the kernel lets it
/// (`/proc/PID/map_files`, for root) and so profiles as if nothing happened; elsewhere it
/// refuses what is at the path now, in one line. Either way it ends (a FIFO's open never
/// does) and its memory stays small (reading the sparse file took 3 GiB).
fn hostile_library(without_caps: bool) {
    let py = &fixture::pythons()[0];
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for swap in [Swap::Keep, Swap::Copy, Swap::Fifo, Swap::Sparse] {
        // The output is kept open until the spinner is killed.
        let Some((mut child, _out, dir)) = relocated_spinner(py, swap, without_caps) else {
            crate::fixture::skipped(&format!(
                "skipped: CPython {} has no libpython to relocate",
                py.minor
            ));
            return;
        };
        let ended = attach_within(&py.exe, child.id(), without_caps, Duration::from_secs(120));
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "{swap:?} (without capabilities: {without_caps}): exit {:?}, peak RSS {} KiB, {}",
            ended.code,
            ended.peak_rss_kib,
            ended.stderr.trim()
        );
        assert!(
            ended.peak_rss_kib < 256 << 10,
            "{swap:?}: mlprof's peak RSS was {} KiB",
            ended.peak_rss_kib
        );
        let works = swap == Swap::Keep || (root && !without_caps);
        if works {
            assert_eq!(ended.code, Some(0), "{swap:?}: {}", ended.stderr);
            assert!(ended.profile.is_some_and(|p| p.attached));
        } else {
            let expected = match swap {
                Swap::Keep => unreachable!(),
                Swap::Copy => "not the file mapped",
                Swap::Fifo => "not a regular file (a FIFO)",
                Swap::Sparse => "more than the 1024 MiB read",
            };
            assert_ne!(ended.code, Some(0), "{swap:?}: {}", ended.stderr);
            assert_eq!(
                ended.stderr.lines().count(),
                1,
                "{swap:?}: {}",
                ended.stderr
            );
            assert!(
                ended.stderr.starts_with("mlprof: ")
                    && ended
                        .stderr
                        .contains("but mlprof cannot read its symbols there")
                    && ended.stderr.contains(expected),
                "{swap:?}: {}",
                ended.stderr
            );
        }
    }
}

#[test]
fn a_replaced_interpreter_library_is_read_through_the_mapping() {
    hostile_library(false);
}

/// As root without capabilities: `/proc/PID/map_files` is closed, the path is all there is.
#[test]
fn a_replaced_interpreter_library_is_refused_without_map_files() {
    let dropped = || {
        Command::new("setpriv")
            .args(NO_CAPS)
            .arg("true")
            .status()
            .is_ok_and(|s| s.success())
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !dropped() {
        crate::fixture::skipped("skipped: needs root and setpriv that can drop capabilities");
        return;
    }
    hostile_library(true);
}
