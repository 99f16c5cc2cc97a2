//! `mlprof attach PID` (issue 17): a running CPython profiled from outside, on every CPython;
//! the program is not harmed (it exits 0 with its normal output); each way attaching can fail
//! is one line and a non-zero status.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::cpu::markers;
use crate::fixture;

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
        assert!(total > 2.0, "CPython {}: {total} s sampled", py.minor);
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
        assert!(
            worker.cpu_python_s > 1.5,
            "CPython {}: worker line {worker:?}",
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
