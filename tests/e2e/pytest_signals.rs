//! `pytest --mlprof` takes signals as plain pytest does: Ctrl-C (SIGINT to the whole
//! foreground process group) ends the run as pytest's KeyboardInterrupt does, with status 2
//! and the session's profile written; `kill PID` (SIGTERM to the pid a job runner knows) leaves
//! no mlprof or inner pytest behind; Ctrl-C at a `(Pdb)` prompt stays in pdb.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fixture;

/// A test that says it runs (a file named by `MLPROF_TEST_READY`), then sleeps a minute.
const WAITING: &str = "\
import os
import time


def test_waits():
    open(os.environ['MLPROF_TEST_READY'], 'w').close()
    for _ in range(600):
        time.sleep(0.1)
";

/// A test that stops in pdb, then passes.
const BREAKS: &str = "\
def test_breaks():
    x = 1
    breakpoint()
    assert x == 1
";

const PLUGIN: [&str; 5] = [
    "-p",
    "mlprof.pytest_plugin",
    "-p",
    "no:cacheprovider",
    "--mlprof",
];

/// `pytest --mlprof ARGS` in `dir`, in a process group of its own, its output collected by
/// threads.
struct Run {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Run {
    fn start(py: &fixture::Python, dir: &Path, args: &[&str], stdin: Stdio) -> Run {
        let mut all = vec!["-m", "pytest"];
        all.extend(PLUGIN);
        all.extend(args);
        Run::python(py, dir, &all, stdin)
    }

    /// `python ARGS` in `dir`, as [`Run::start`], with the signal state of a job a shell
    /// starts in the foreground of a terminal ([`foreground_signals`]).
    fn python(py: &fixture::Python, dir: &Path, args: &[&str], stdin: Stdio) -> Run {
        let mut command = Command::new(&py.exe);
        foreground_signals(&mut command);
        let mut child = command
            .args(args)
            .current_dir(dir)
            .env("PYTHONPATH", fixture::root().join("python"))
            .env("MLPROF_BIN", env!("CARGO_BIN_EXE_mlprof"))
            .env("MLPROF_TEST_READY", dir.join("ready"))
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("run pytest");
        let out = Arc::new(Mutex::new(Vec::new()));
        for mut pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = Arc::clone(&out);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
        Run { child, out }
    }

    fn pgid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    /// Wait (at most `secs`) for `done`, failing with the output so far.
    fn wait_for(&mut self, what: &str, secs: u64, mut done: impl FnMut(&mut Run) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !done(self) {
            if Instant::now() > deadline {
                let text = self.text();
                self.kill_group();
                panic!("no {what} within {secs} s: {text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn exit(&mut self, secs: u64) -> ExitStatus {
        let mut status = None;
        self.wait_for("exit", secs, |run| {
            status = run.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    }

    fn signal_group(&self, sig: libc::c_int) {
        // SAFETY: kill has no memory-safety preconditions; the group is the one we started.
        assert_eq!(unsafe { libc::kill(-self.pgid(), sig) }, 0);
    }

    fn kill_group(&self) {
        // SAFETY: as above; the group may be gone already.
        unsafe { libc::kill(-self.pgid(), libc::SIGKILL) };
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.kill_group();
        let _ = self.child.wait();
    }
}

/// The signals these tests send (Ctrl-C's SIGINT, SIGQUIT, and `kill`'s SIGTERM, SIGHUP) at
/// their defaults and unblocked in `command`, as in a job a shell starts in the foreground of
/// a terminal, whatever this test process inherited: an ignored disposition and a blocked
/// mask pass through fork and exec, and a test run started in the background of a
/// non-interactive shell (`cargo test ... &`: SIGINT and SIGQUIT ignored) gave Python an
/// ignored SIGINT, which it keeps: Ctrl-C then did nothing, to plain pytest as to mlprof's.
fn foreground_signals(command: &mut Command) {
    const SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        for sig in SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
    }
    // SAFETY: the closure runs between fork and exec and calls only signal and
    // pthread_sigmask, both async-signal-safe, on a set made before the fork; it allocates
    // nothing.
    unsafe {
        command.pre_exec(move || {
            for sig in SIGNALS {
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// Live (not zombie) processes of process group `pgid`, as `pid (comm) state` lines.
fn group_members(pgid: libc::pid_t) -> Vec<String> {
    group(pgid).into_iter().map(|(_, line)| line).collect()
}

/// Live processes of process group `pgid`: pid, and `pid (comm) state`.
fn group(pgid: libc::pid_t) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = tail.split_whitespace().collect();
        if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
            found.push((pid, format!("{head}) {}", fields[0])));
        }
    }
    found
}

/// Whether a process of group `pgid` waits in `read(0, ...)`: pdb reading its next command.
/// A Ctrl-C before that read began would be lost by Python itself (the flag its handler sets
/// is checked again only when the read is interrupted), with or without mlprof.
fn reading_stdin(pgid: libc::pid_t) -> bool {
    group(pgid).into_iter().any(|(pid, _)| {
        let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        let mut words = call.split_whitespace();
        words.next() == Some(&libc::SYS_read.to_string()) && words.next() == Some("0x0")
    })
}

fn module(source: &str, name: &str) -> PathBuf {
    let dir = fixture::tempdir();
    std::fs::write(dir.join(name), source).unwrap();
    dir
}

#[test]
fn ctrl_c_ends_the_run_as_pytest_does_and_the_profile_is_written() {
    let dir = module(WAITING, "test_wait.py");
    let mut run = Run::start(
        &fixture::numpy_pythons()[0],
        &dir,
        &["--mlprof-output", "session.json", "test_wait.py"],
        Stdio::null(),
    );
    let ready = dir.join("ready");
    run.wait_for("running test", 120, |_| ready.exists());
    // No outer pytest waits on mlprof: it became mlprof, the pid its caller knows.
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", run.child.id())).unwrap();
    run.signal_group(libc::SIGINT);
    let status = run.exit(60);
    let text = run.text();
    assert_eq!(
        status.code(),
        Some(2),
        "pytest's interrupted status: {text}"
    );
    assert!(text.contains("KeyboardInterrupt"), "{text}");
    let profile = std::fs::read_to_string(dir.join("session.json"))
        .unwrap_or_else(|e| panic!("no profile written ({e}): {text}"));
    let profile = fixture::check_profile(&profile);
    assert!(
        profile
            .regions
            .iter()
            .any(|r| r.name == "test_wait.py::test_waits"),
        "the interrupted test is in the profile: {:?}",
        profile.regions
    );
    let left = group_members(run.pgid());
    assert!(left.is_empty(), "left running: {left:?}\n{text}");
    assert_eq!(comm.trim(), "mlprof", "pytest became mlprof");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_to_the_pytest_pid_leaves_nothing_running() {
    let dir = module(WAITING, "test_wait.py");
    let mut run = Run::start(
        &fixture::numpy_pythons()[0],
        &dir,
        &["--mlprof-output", "session.json", "test_wait.py"],
        Stdio::null(),
    );
    let ready = dir.join("ready");
    run.wait_for("running test", 120, |_| ready.exists());
    let pid = run.child.id() as libc::pid_t;
    // SAFETY: kill has no memory-safety preconditions; the pid is our child, not reaped.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let status = run.exit(60);
    let pgid = run.pgid();
    run.wait_for("end of every process of the run", 30, |_| {
        group_members(pgid).is_empty()
    });
    let text = run.text();
    assert!(
        status.code() == Some(128 + libc::SIGTERM) || status.signal() == Some(libc::SIGTERM),
        "ended by SIGTERM: {status:?}: {text}"
    );
    let profile = std::fs::read_to_string(dir.join("session.json"))
        .unwrap_or_else(|e| panic!("no profile written ({e}): {text}"));
    fixture::check_profile(&profile);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pytest.main()` in a program that goes on after it: the outer pytest stays, passes a
/// signal on to mlprof, and takes it itself once the report is written: a Ctrl-C is pytest's
/// status 2 returned to the program, a SIGTERM ends the program as it would without mlprof.
#[test]
fn pytest_main_in_a_program_passes_signals_on() {
    let py = &fixture::numpy_pythons()[0];
    let dir = module(WAITING, "test_wait.py");
    let mut main = format!("import pytest\ncode = pytest.main({PLUGIN:?} + ");
    main += "['--mlprof-output', 'session.json', 'test_wait.py'])\n";
    main += "print('pytest.main returned', int(code))\n";
    std::fs::write(dir.join("main.py"), main).unwrap();
    let ready = dir.join("ready");
    let profile = dir.join("session.json");

    let mut run = Run::python(py, &dir, &["main.py"], Stdio::null());
    run.wait_for("running test", 120, |_| ready.exists());
    run.signal_group(libc::SIGINT);
    let status = run.exit(60);
    let text = run.text();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("pytest.main returned 2"), "{text}");
    fixture::check_profile(&std::fs::read_to_string(&profile).unwrap());
    let left = group_members(run.pgid());
    assert!(left.is_empty(), "left running: {left:?}\n{text}");
    drop(run);

    std::fs::remove_file(&ready).unwrap();
    std::fs::remove_file(&profile).unwrap();
    let mut run = Run::python(py, &dir, &["main.py"], Stdio::null());
    run.wait_for("running test", 120, |_| ready.exists());
    let pid = run.child.id() as libc::pid_t;
    // SAFETY: kill has no memory-safety preconditions; the pid is our child, not reaped.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let status = run.exit(60);
    let pgid = run.pgid();
    run.wait_for("end of every process of the run", 30, |_| {
        group_members(pgid).is_empty()
    });
    let text = run.text();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}: {text}");
    assert!(!text.contains("pytest.main returned"), "{text}");
    fixture::check_profile(&std::fs::read_to_string(&profile).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

/// On every Python: pdb's prompt loop changed over the versions (3.13's is new).
#[test]
fn ctrl_c_at_a_pdb_prompt_stays_in_pdb() {
    for py in fixture::spread(fixture::numpy_pythons()) {
        ctrl_c_at_a_pdb_prompt(py, false);
    }
}

/// A Ctrl-C that mlprof takes up late (its collector stalled: a loaded machine, a CPU quota
/// used up), long after pdb had it, is still not sent again.
#[test]
fn a_ctrl_c_mlprof_takes_up_late_is_not_sent_twice() {
    ctrl_c_at_a_pdb_prompt(&fixture::numpy_pythons()[0], true);
}

/// With `stall`, mlprof (the pid pytest started as) is stopped from before the Ctrl-C until a
/// second after pdb took it.
fn ctrl_c_at_a_pdb_prompt(py: &fixture::Python, stall: bool) {
    let dir = module(BREAKS, "test_pdb.py");
    let mut run = Run::start(py, &dir, &["test_pdb.py"], Stdio::piped());
    let prompts = |run: &mut Run| run.text().matches("(Pdb) ").count();
    let pgid = run.pgid();
    run.wait_for("pdb prompt", 120, |run| {
        prompts(run) >= 1 && reading_stdin(pgid)
    });
    let mlprof = run.child.id() as libc::pid_t;
    if stall {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child, not reaped.
        assert_eq!(unsafe { libc::kill(mlprof, libc::SIGSTOP) }, 0);
    }
    run.signal_group(libc::SIGINT);
    run.wait_for("second pdb prompt after Ctrl-C", 30, |run| {
        prompts(run) >= 2
    });
    if stall {
        std::thread::sleep(Duration::from_secs(1));
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(mlprof, libc::SIGCONT) }, 0);
    }
    // The run is still there a while later: nothing of ours took the Ctrl-C as the end.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        run.child.try_wait().unwrap().is_none(),
        "CPython {}: pytest ended on Ctrl-C at the pdb prompt: {}",
        py.minor,
        run.text()
    );
    let mut stdin = run.child.stdin.take().unwrap();
    stdin.write_all(b"c\n").unwrap();
    drop(stdin);
    let status = run.exit(60);
    let text = run.text();
    assert_eq!(status.code(), Some(0), "CPython {}: {text}", py.minor);
    assert!(text.contains("1 passed"), "CPython {}: {text}", py.minor);
    assert_eq!(
        text.matches("--KeyboardInterrupt--").count(),
        1,
        "CPython {}: pdb saw one Ctrl-C: {text}",
        py.minor
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// pdb in the inner pytest reads the stdin pytest was given (pytest's capturing holds stdin on
/// /dev/null until its end, so it is given back first): from the command line and from
/// `pytest.main()` in a program.
#[test]
fn pdb_reads_the_stdin_pytest_was_given() {
    let py = &fixture::numpy_pythons()[0];
    let dir = module(BREAKS, "test_pdb.py");
    let main = format!(
        "import pytest\nprint('returned', int(pytest.main({PLUGIN:?} + ['test_pdb.py'])))\n"
    );
    std::fs::write(dir.join("main.py"), main).unwrap();
    for in_program in [false, true] {
        let how = if in_program {
            "pytest.main()"
        } else {
            "pytest"
        };
        let mut run = if in_program {
            Run::python(py, &dir, &["main.py"], Stdio::piped())
        } else {
            Run::start(py, &dir, &["test_pdb.py"], Stdio::piped())
        };
        let mut stdin = run.child.stdin.take().unwrap();
        stdin.write_all(b"p 6 * 7\nc\n").unwrap();
        drop(stdin);
        let status = run.exit(120);
        let text = run.text();
        assert_eq!(status.code(), Some(0), "{how}: {text}");
        assert!(text.contains("(Pdb) 42"), "{how}: {text}");
        assert!(text.contains("1 passed"), "{how}: {text}");
        if in_program {
            assert!(text.contains("returned 0"), "{text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
