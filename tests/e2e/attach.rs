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
    let mut child = Command::new(python)
        .arg(fixture::script(script))
        .arg(seconds)
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
fn attached(pid: u32, seconds: &str) -> mlprof::model::Profile {
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
    for py in fixture::pythons() {
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
            join.cpu_system_s > 1.5 && join.cpu_python_s + join.cpu_native_s < 0.2,
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
        eprintln!("skipped: needs root and setpriv to run mlprof as another user");
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
        eprintln!(
            "skipped: setpriv could not switch users here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
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
