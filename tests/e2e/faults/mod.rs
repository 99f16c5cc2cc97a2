//! The fault-injection suite: programs that do what real programs do (daemon threads at exit,
//! `pthread_exit`, failing subprocesses, signals to the group, a full TMPDIR, scribbled or
//! truncated channels, odd file names) run with and without mlprof. Each asserts that the
//! program's exit status and output are exactly as without mlprof, that mlprof ends within
//! seconds of the program, and that a report is written whenever the program ran.

mod channel;
mod cli;
mod program;
mod streams;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Longest a profiled run may take (the programs themselves run for a few seconds at most).
pub const LIMIT: Duration = Duration::from_secs(60);

use crate::fixture;

/// A script of the fault suite (`tests/scripts/faults/NAME`).
pub fn script(name: &str) -> PathBuf {
    fixture::root().join("tests/scripts/faults").join(name)
}

/// One run of a command under mlprof, with its profile if one was written.
pub struct Profiled {
    pub output: Output,
    pub elapsed: Duration,
    /// The JSON profile text, if mlprof wrote one.
    pub profile: Option<String>,
}

impl Profiled {
    /// The parsed profile (checked against the schema and invariants); panics if none.
    pub fn profile(&self) -> mlprof::model::Profile {
        let text = self.profile.as_deref().unwrap_or_else(|| {
            panic!(
                "no profile written; mlprof said: {}",
                String::from_utf8_lossy(&self.output.stderr)
            )
        });
        fixture::check_profile(text)
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// Run `args` without mlprof.
pub fn plain(args: &[&OsStr], env: &[(&str, &str)]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run the program")
}

/// `mlprof run OPTIONS -o DIR/profile.json -- args`, timed, with `env` for mlprof and the
/// program. mlprof is killed after [`LIMIT`]: a hang is a failure, not a stuck test.
pub fn profiled(options: &[&str], args: &[&OsStr], env: &[(&str, &str)]) -> Profiled {
    let (output, elapsed, profile) = fixture::run_mlprof(options, args, env, LIMIT);
    Profiled {
        output,
        elapsed,
        profile,
    }
}

/// Run `args` with and without mlprof and assert the program behaved the same: exit status,
/// stdout exactly, and stderr exactly once mlprof's own lines (`mlprof: ...`) are set aside.
/// Returns the profiled run.
pub fn same_behaviour(args: &[&OsStr], env: &[(&str, &str)]) -> Profiled {
    let expected = plain(args, env);
    let run = profiled(&[], args, env);
    assert_same(&expected, &run.output, args);
    run
}

/// The program's own stderr lines: mlprof's (`mlprof: ...`) removed.
pub fn program_stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.starts_with("mlprof:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Assert two runs of a program agree in status, stdout and the program's stderr.
pub fn assert_same(expected: &Output, got: &Output, args: &[&OsStr]) {
    assert_eq!(
        expected.status.code(),
        got.status.code(),
        "{args:?}: exit status differs under mlprof; mlprof stderr: {}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&expected.stdout),
        String::from_utf8_lossy(&got.stdout),
        "{args:?}: stdout differs under mlprof"
    );
    assert_eq!(
        program_stderr(expected),
        program_stderr(got),
        "{args:?}: the program's stderr differs under mlprof"
    );
}

/// Path as `&OsStr`.
pub fn os<S: AsRef<OsStr> + ?Sized>(s: &S) -> &OsStr {
    s.as_ref()
}

/// Does `path` exist and is it a directory we may write in?
pub fn writable_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir())
}
