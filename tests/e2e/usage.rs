//! Errors that teach (issue 34): a mistyped or foreign option before the command is a usage
//! error naming mlprof's nearest option, never a command mlprof tries to run; a script given
//! as the command is answered with how to run it; a budget without a unit is refused. Each
//! before the program runs, with a non-zero status.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

use crate::fixture::{self, os, pythons};

/// `mlprof ARGS` in `dir`.
fn mlprof_in(dir: &Path, args: &[&OsStr]) -> Output {
    fixture::mlprof()
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// A Python program that creates the file `marker` when it runs.
fn marking(marker: &Path) -> Vec<std::ffi::OsString> {
    vec![
        pythons()[0].exe.clone().into(),
        "-c".into(),
        format!("open({:?}, 'w').close()", marker.to_str().unwrap()).into(),
    ]
}

#[test]
fn an_unknown_option_before_the_command_names_the_nearest_one() {
    let dir = fixture::tempdir();
    let marker = dir.join("ran");
    for (option, nearest) in [
        ("--sample-rate", "--rate"),
        ("--cpu-sampling-rate", "--rate"),
        ("--rat", "--rate"),
        ("--max-peek", "--max-peak"),
    ] {
        let mut args = vec![os("run"), os(option), os("50"), os("--")];
        let program = marking(&marker);
        args.extend(program.iter().map(os));
        let out = mlprof_in(&dir, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{option}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: unexpected argument '{option}' found")),
            "{option}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("a similar argument exists: '{nearest}'")),
            "{option}: {stderr}"
        );
        assert!(!stderr.contains("cannot run"), "{option}: {stderr}");
        assert!(
            !stderr.contains("-- --"),
            "{option}: no tip to run it: {stderr}"
        );
        assert!(!marker.exists(), "{option}: the program must not have run");
    }

    // Options after the command are the program's, with or without `--` before it.
    let py = &pythons()[0].exe;
    let echo = "import sys; print(sys.argv[1:])";
    for args in [
        vec![os("run"), os("-q"), os("--"), os(py), os("-c"), os(echo)],
        vec![os("run"), os("-q"), os(py), os("-c"), os(echo)],
    ] {
        let mut args = args;
        args.extend([os("--sample-rate"), os("50")]);
        let out = mlprof_in(&dir, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "['--sample-rate', '50']\n"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `mlprof run -- train.py` with `train.py` here: not a command on PATH, not executable, or
/// executable without a `#!` line (which the system would hand to `/bin/sh`).
#[test]
fn a_script_given_as_the_command_is_told_how_to_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fixture::tempdir();
    let marker = dir.join("ran");
    let script = dir.join("train.py");
    std::fs::write(&script, format!("open({:?}, 'w').close()\n", "ran")).unwrap();
    let mode = |m: u32| {
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(0o644);
    for (command, mode_bits, code, want) in [
        ("train.py", 0o644, 127, "not a command on PATH"),
        ("train.py", 0o755, 127, "not a command on PATH"),
        (
            "./train.py",
            0o644,
            126,
            "Permission denied: the file is not executable",
        ),
        ("./train.py", 0o755, 126, "it has no #! line"),
    ] {
        mode(mode_bits);
        let out = mlprof_in(&dir, &[os("run"), os("--"), os(command)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{command}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command}: {stderr}");
        assert!(
            stderr.starts_with(&format!("mlprof: cannot run '{command}': {want}")),
            "{command}: {stderr}"
        );
        assert!(
            stderr.trim_end().ends_with(&format!(" {command}'?"))
                && stderr.contains("did you mean 'python"),
            "{command}: {stderr}"
        );
        assert!(!marker.exists(), "{command}: must not have run");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--max-peak 50` would be 50 bytes: a budget flag needs a unit (`50B` says bytes).
#[test]
fn a_budget_without_a_unit_is_refused_before_the_program_runs() {
    let dir = fixture::tempdir();
    let marker = dir.join("ran");
    for flag in ["--max-peak", "--max-rss", "--max-leak", "--max-gpu-memory"] {
        let mut args = vec![os("run"), os(flag), os("50"), os("--")];
        let program = marking(&marker);
        args.extend(program.iter().map(os));
        let out = mlprof_in(&dir, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains("'50' has no unit: write 50B for bytes, or 50MiB"),
            "{flag}: {stderr}"
        );
        assert!(!marker.exists(), "{flag}: the program must not have run");
    }
    let check = mlprof_in(
        &dir,
        &[
            os("check"),
            os("/nonexistent.json"),
            os("--max-peak"),
            os("2"),
        ],
    );
    assert_eq!(check.status.code(), Some(2));
    // With a unit, bytes included, it runs.
    let mut args = vec![os("run"), os("-q"), os("--max-peak"), os("1GB"), os("--")];
    let program = marking(&marker);
    args.extend(program.iter().map(os));
    assert_eq!(mlprof_in(&dir, &args).status.code(), Some(0));
    assert!(marker.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
