//! The program's streams are the program's: with `-q` nothing of mlprof's reaches its stderr,
//! whatever the profile warns of; with `-o` a run with warnings adds one line, a run without
//! adds none, and every warning stays in the profile.

use std::ffi::OsStr;
use std::process::Stdio;

use super::{plain, profiled, script};
use crate::fixture::{self, os, pythons};

/// The warnings of a profile that say SIGPROF was blocked.
fn sigprof_warnings(p: &mlprof::model::Profile) -> usize {
    p.warnings
        .iter()
        .filter(|w| w.contains("blocked SIGPROF"))
        .count()
}

#[test]
fn with_q_the_programs_stderr_is_byte_for_byte_its_own() {
    let path = script("own_stderr.py");
    for py in fixture::spread(pythons()) {
        let argv: Vec<&OsStr> = vec![os(&py.exe), os(&path)];
        let expected = plain(&argv, &[]);
        assert!(
            String::from_utf8_lossy(&expected.stderr).ends_with("no newline at the end"),
            "{}: {:?}",
            py.minor,
            String::from_utf8_lossy(&expected.stderr)
        );
        // -q with -o: the profile is saved and holds both processes' warnings.
        let saved = profiled(&["-q"], &argv, &[]);
        assert_eq!(saved.output.status.code(), expected.status.code());
        assert_eq!(saved.output.stdout, expected.stdout, "{}", py.minor);
        assert_eq!(
            String::from_utf8_lossy(&saved.output.stderr),
            String::from_utf8_lossy(&expected.stderr),
            "{}: stderr with -q -o",
            py.minor
        );
        let p = saved.profile();
        assert_eq!(sigprof_warnings(&p), 2, "{}: {:#?}", py.minor, p.warnings);
        // -q alone: no report, no file, the same stderr.
        let quiet = fixture::mlprof()
            .args(["run", "-q", "--"])
            .args(&argv)
            .stdin(Stdio::null())
            .output()
            .expect("run mlprof");
        assert_eq!(quiet.status.code(), expected.status.code());
        assert_eq!(quiet.stdout, expected.stdout, "{}", py.minor);
        assert_eq!(
            String::from_utf8_lossy(&quiet.stderr),
            String::from_utf8_lossy(&expected.stderr),
            "{}: stderr with -q",
            py.minor
        );
    }
}

#[test]
fn with_o_warnings_are_one_line_and_a_run_without_any_adds_none() {
    let py = &pythons()[0];
    // Two true warnings: the program's stderr, then one line of mlprof's naming the first and
    // counting the other.
    let path = script("own_stderr.py");
    let argv: Vec<&OsStr> = vec![os(&py.exe), os(&path)];
    let expected = String::from_utf8_lossy(&plain(&argv, &[]).stderr).into_owned();
    let run = profiled(&[], &argv, &[]);
    let got = run.stderr();
    // The program's stderr first, as it wrote it (its last line has no newline), then ours.
    let ours = got
        .strip_prefix(expected.as_str())
        .unwrap_or_else(|| panic!("the program's stderr changed: {got}"));
    assert_eq!(ours.matches('\n').count(), 1, "{ours}");
    assert!(
        ours.starts_with("mlprof: warning: pid ")
            && ours.contains("blocked SIGPROF")
            && ours.ends_with("(and 1 more warning in the report)\n"),
        "{ours}"
    );
    assert_eq!(sigprof_warnings(&run.profile()), 2);
    // A helper thread that blocks every signal and waits (PyTorch's, jemalloc's) uses no CPU:
    // no warning, and the program's stderr exactly.
    let idle = script("sigprof_idle_blocker.py");
    let argv: Vec<&OsStr> = vec![os(&py.exe), os(&idle)];
    let expected = plain(&argv, &[]);
    let run = profiled(&[], &argv, &[]);
    assert_eq!(run.output.stderr, expected.stderr, "{}", run.stderr());
    assert!(run.profile().warnings.is_empty());
}
