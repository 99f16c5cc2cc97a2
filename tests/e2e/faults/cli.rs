//! Fault suite, mlprof's own side: where the report goes (a missing directory fails before the
//! program runs; a full device after it keeps the program's exit status; a report file is
//! replaced atomically), names from the program that are terminal escapes or HTML, typos in a
//! budget file, and signals to mlprof once the program has ended.

use std::ffi::OsStr;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{assert_same, os, plain, program_stderr, script, writable_dir};
use crate::fixture::{self, pythons};

/// `python cli_exit.py CODE [MARKER]` with the first Python.
fn exit_program(code: &str, marker: Option<&Path>) -> Vec<PathBuf> {
    let mut argv = vec![pythons()[0].exe.clone(), script("cli_exit.py"), code.into()];
    argv.extend(marker.map(Path::to_path_buf));
    argv
}

/// mlprof's own lines (`mlprof: ...`) on stderr.
fn mlprof_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("mlprof:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_report_into_a_missing_directory_fails_before_the_program_runs() {
    assert!(!writable_dir(Path::new("/nonexistent/dir")), "precondition");
    let dir = fixture::tempdir();
    assert!(writable_dir(&dir));
    let marker = dir.join("ran");
    for target in ["/nonexistent/dir/p.json", "/nonexistent/dir/report.txt"] {
        let started = Instant::now();
        let out = fixture::run(
            &[os("-o"), os(target)],
            &exit_program("0", Some(&marker)),
            &[],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(
            stderr,
            format!("mlprof: cannot write {target}: directory /nonexistent/dir does not exist\n"),
            "one line naming the problem"
        );
        assert!(!marker.exists(), "the program must not have run");
        assert!(out.stdout.is_empty(), "the program must not have run");
        assert!(started.elapsed() < Duration::from_secs(10), "fails fast");
    }
    // A directory as the report, and a bad --junit file, fail first too.
    for options in [
        vec![os("-o"), dir.as_os_str()],
        vec![os("-q"), os("--junit"), os("/nonexistent/dir/j.xml")],
    ] {
        let out = fixture::run(&options, &exit_program("0", Some(&marker)), &[]);
        assert_eq!(out.status.code(), Some(70), "{options:?}");
        assert_eq!(mlprof_lines(&out).len(), 1, "{options:?}");
        assert!(
            !marker.exists(),
            "{options:?}: the program must not have run"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_report_that_cannot_be_written_after_the_run_keeps_the_programs_exit_status() {
    let program = exit_program("3", None);
    let argv: Vec<&OsStr> = program.iter().map(os).collect();
    let expected = plain(&argv, &[]);
    assert_eq!(expected.status.code(), Some(3));
    for options in [
        vec![os("-o"), os("/dev/full")],
        vec![os("--text"), os("-o"), os("/dev/full")],
        vec![os("-q"), os("--junit"), os("/dev/full")],
    ] {
        let out = fixture::run(&options, &program, &[]);
        assert_same(&expected, &out, &argv);
        let lines = mlprof_lines(&out);
        assert_eq!(lines.len(), 1, "{options:?}: {lines:?}");
        assert!(
            lines[0].contains("/dev/full") && lines[0].contains("No space left on device"),
            "{options:?}: {lines:?}"
        );
    }
    // Nor does a stderr that cannot take mlprof's own lines (a budget verdict here).
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let status = fixture::mlprof()
        .args(["run", "-q", "--max-peak", "1B", "--"])
        .args(&program)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(full)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3), "2>/dev/full");
    // A budget exceeded still exits 97 (the program succeeded), even with the report lost.
    let out = fixture::run(
        &[os("--max-peak"), os("1B"), os("-o"), os("/dev/full")],
        &exit_program("0", None),
        &[],
    );
    assert_eq!(out.status.code(), Some(97), "{}", program_stderr(&out));
}

/// Issue 34: a report lost after the run (its directory removed meanwhile) keeps the
/// program's status, except in CI modes (a budget, a baseline or `--junit`), where a run that
/// succeeded exits 70: a gate must not pass on a report nobody can read.
#[test]
fn a_report_lost_after_the_run_fails_a_run_in_ci_modes() {
    for (options, code, want) in [
        (vec!["-o", "DIR/p.json"], "0", 0),
        (vec!["-o", "DIR/p.json", "--max-peak", "1GiB"], "0", 70),
        (vec!["-q", "--junit", "DIR/budgets.xml"], "0", 70),
        (
            vec!["--json", "-o", "DIR/p.json", "--budget", "BUDGET"],
            "0",
            70,
        ),
        (vec!["-o", "DIR/p.json", "--max-peak", "1GiB"], "3", 3),
        (vec!["-o", "DIR/p.json", "--max-peak", "1B"], "0", 97),
    ] {
        let root = fixture::tempdir();
        let dir = root.join("reports");
        std::fs::create_dir(&dir).unwrap();
        let budget = root.join("mlprof.toml");
        std::fs::write(&budget, "max-peak = \"1GiB\"\n").unwrap();
        let options: Vec<String> = options
            .iter()
            .map(|o| {
                o.replace("DIR", dir.to_str().unwrap())
                    .replace("BUDGET", budget.to_str().unwrap())
            })
            .collect();
        let program = [
            pythons()[0].exe.clone(),
            script("cli_rmdir.py"),
            dir.clone(),
            code.into(),
        ];
        let out = fixture::run(&options, &program, &[]);
        let lines = mlprof_lines(&out);
        assert_eq!(out.status.code(), Some(want), "{options:?}: {lines:?}");
        assert!(!dir.exists(), "{options:?}: the program ran");
        let lost: Vec<&String> = lines.iter().filter(|l| l.contains("not exist")).collect();
        assert_eq!(
            lost.len(),
            1,
            "{options:?}: one line says what was lost: {lines:?}"
        );
        assert_eq!(
            lost[0].contains("exit status 70"),
            want == 70,
            "{options:?}: {lines:?}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[test]
fn a_report_file_is_replaced_atomically_and_leaves_no_temporary_file() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = fixture::tempdir();
    let path = dir.join("p.json");
    let out = fixture::run(&[os("-o"), path.as_os_str()], &exit_program("0", None), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", program_stderr(&out));
    let names = fixture::dir_entries;
    assert_eq!(names(&dir), ["p.json"]);
    fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "a new profile is private"
    );

    // `mlprof report` and `export` write their files the same way.
    let text = dir.join("again.txt");
    let folded = dir.join("folded.txt");
    for args in [
        vec![os("report"), path.as_os_str(), os("-o"), text.as_os_str()],
        vec![
            os("export"),
            path.as_os_str(),
            os("--format"),
            os("folded"),
            os("-o"),
            folded.as_os_str(),
        ],
    ] {
        let out = fixture::mlprof().args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            program_stderr(&out)
        );
    }
    assert_eq!(names(&dir), ["again.txt", "folded.txt", "p.json"]);

    // Written again: a new file renamed over the old one, with the old one's permissions.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = meta.ino();
    let out = fixture::run(
        &[os("--text"), os("-o"), path.as_os_str()],
        &exit_program("0", None),
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", program_stderr(&out));
    assert_eq!(names(&dir), ["again.txt", "folded.txt", "p.json"]);
    let meta = std::fs::metadata(&path).unwrap();
    assert_ne!(meta.ino(), before, "renamed over, not rewritten in place");
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .starts_with("mlprof: "));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn names_from_the_program_reach_no_terminal_raw_and_keep_folded_lines_whole() {
    let dir = fixture::tempdir();
    let profile = dir.join("p.json");
    for py in pythons() {
        let out = fixture::mlprof()
            .args(["run", "-o"])
            .arg(&profile)
            .arg("--")
            .arg(&py.exe)
            .arg(script("cli_escapes.py"))
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{}: {stderr}", py.minor);
        assert!(!out.stderr.contains(&0x1b), "{}: {stderr:?}", py.minor);
        let p = fixture::check_profile(&std::fs::read_to_string(&profile).unwrap());

        // The text report, saved and shown again.
        let text_file = dir.join("r.txt");
        let run_text = fixture::mlprof()
            .args(["run", "--text", "-o"])
            .arg(&text_file)
            .arg("--")
            .arg(&py.exe)
            .arg(script("cli_escapes.py"))
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(run_text.status.code(), Some(0), "{}", py.minor);
        let reported = fixture::mlprof()
            .args(["report", "--text"])
            .arg(&profile)
            .output()
            .unwrap();
        assert_eq!(reported.status.code(), Some(0), "{}", py.minor);
        for text in [std::fs::read(&text_file).unwrap(), reported.stdout] {
            let text = String::from_utf8(text).unwrap();
            assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "{}: raw control character in\n{text}",
                py.minor
            );
            assert!(
                text.contains("\\x1b]0;pwned\\x07\\x1b[2J.py"),
                "{}: the file is reported, escaped:\n{text}",
                py.minor
            );
            assert!(
                text.contains("end:  # \\x1b["),
                "{}: its source line, escaped:\n{text}",
                py.minor
            );
        }

        // Folded stacks: one stack per line, `frames value`.
        let folded = fixture::mlprof()
            .args(["export", "--format", "folded"])
            .arg(&profile)
            .output()
            .unwrap();
        assert_eq!(folded.status.code(), Some(0), "{}", py.minor);
        let folded = String::from_utf8(folded.stdout).unwrap();
        let with_cpu = p
            .stacks
            .iter()
            .filter(|s| ((s.cpu_python_s + s.cpu_native_s) * 1e6).round() > 0.0)
            .count();
        assert_eq!(folded.lines().count(), with_cpu, "{}:\n{folded}", py.minor);
        for line in folded.lines() {
            let (stack, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<u64>().is_ok(), "{line:?}");
            assert!(
                !line.chars().any(char::is_control),
                "{}: {line:?}",
                py.minor
            );
            if stack.contains("pwned") {
                let frames: Vec<&str> = stack.split(';').collect();
                assert!(
                    frames.iter().all(|f| f.contains('(') && f.ends_with(')')),
                    "{}: each frame whole: {frames:?}",
                    py.minor
                );
            }
        }
        assert!(folded.contains("pwned"), "{}:\n{folded}", py.minor);

        // The HTML page: the `<script>` file name is escaped.
        let page = fixture::mlprof()
            .args(["report", "--html"])
            .arg(&profile)
            .output()
            .unwrap();
        let page = String::from_utf8(page.stdout).unwrap();
        assert!(!page.contains("<script>alert(1)"), "{}", py.minor);
        assert!(
            page.contains("\\u003cscript\\u003ealert(1)"),
            "{}: the file is in the page, escaped",
            py.minor
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_typo_in_a_budget_file_fails_before_the_program_runs() {
    let dir = fixture::tempdir();
    let marker = dir.join("ran");
    let file = dir.join("mlprof.toml");
    for (text, want) in [
        (
            "max-peak = \"6GiB\"\n[lines]\n\"train.py;88\" = \"2GiB\"\n",
            ":3:1: [lines] key 'train.py;88' is not FILE:LINE",
        ),
        (
            "[functions]\n\"model.py:forward\" = \"3GiB\"\n",
            ":2:1: [functions] key 'model.py:forward' is not FILE::FUNCTION",
        ),
        (
            "max-peak = \"6GiB\"\n[functoins]\n\"model.py::forward\" = \"3GiB\"\n",
            ":2:2: unknown key 'functoins'",
        ),
        ("max-peek = \"6GiB\"\n", ":1:1: unknown key 'max-peek'"),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = fixture::run(
            &[os("--budget"), file.as_os_str()],
            &exit_program("0", Some(&marker)),
            &[],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{text:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{text:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("mlprof: {}{want}", file.display())),
            "{text:?}: {stderr}"
        );
        assert!(!marker.exists(), "{text:?}: the program must not have run");
        let checked = fixture::mlprof()
            .args(["check", "/nonexistent.json", "--budget"])
            .arg(&file)
            .output()
            .unwrap();
        assert_ne!(checked.status.code(), Some(0));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// mlprof must be gone this soon after the signal that ends it.
const PROMPT: Duration = Duration::from_secs(10);

/// Start `mlprof run OPTIONS -- PROGRAM`, stdout piped, and read the program's first line.
fn start(options: &[&OsStr], program: &[PathBuf], first_line: &str) -> Child {
    let mut mlprof = fixture::mlprof()
        .arg("run")
        .args(options)
        .arg("--")
        .args(program)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(mlprof.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, first_line);
    mlprof
}

fn sigterm(child: &Child) {
    // SAFETY: kill on the pid of a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
}

/// Wait for `child` up to `limit`; killed (and the test failed) if it is still running then.
fn finish(mut child: Child, limit: Duration) -> (Option<i32>, Duration, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mlprof still running {limit:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    (status.code(), started.elapsed(), stderr)
}

/// A FIFO nobody reads: writing the report there blocks forever (a stand-in for a hang while
/// the report is made).
fn fifo(dir: &Path) -> PathBuf {
    let path = dir.join("report.fifo");
    let status = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(status.success());
    path
}

#[test]
fn two_sigterms_after_the_program_ended_end_mlprof_with_the_programs_status() {
    let dir = fixture::tempdir();
    let pidfile = dir.join("orphan.pid");
    let report = fifo(&dir);
    let program = vec![
        pythons()[0].exe.clone(),
        script("cli_orphan.py"),
        pidfile.clone(),
        "5".into(),
    ];
    let mlprof = start(
        &[
            os("--wait-children"),
            os("60"),
            os("-o"),
            report.as_os_str(),
        ],
        &program,
        "parent done\n",
    );
    // The program has ended; mlprof waits for the orphan (60 s), then would block on the FIFO.
    std::thread::sleep(Duration::from_millis(500));
    sigterm(&mlprof); // ends the wait
    std::thread::sleep(Duration::from_millis(200));
    sigterm(&mlprof); // abandons the report
    let (code, elapsed, stderr) = finish(mlprof, PROMPT);
    if let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    {
        // SAFETY: kill on the pid the orphan wrote; it sleeps 60 s, so it is still that process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert_eq!(code, Some(5), "the program's own status: {stderr}");
    assert!(elapsed < PROMPT, "{elapsed:?}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("report abandoned"))
            .count(),
        1,
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sigterm_while_the_report_is_made_ends_mlprof_with_the_programs_status() {
    let dir = fixture::tempdir();
    let report = fifo(&dir);
    let mlprof = start(
        &[os("-o"), report.as_os_str()],
        &exit_program("4", None),
        "ran\n",
    );
    // The program has ended; mlprof is blocked writing its report.
    std::thread::sleep(Duration::from_millis(500));
    sigterm(&mlprof);
    let (code, elapsed, stderr) = finish(mlprof, PROMPT);
    assert_eq!(code, Some(4), "the program's own status: {stderr}");
    assert!(elapsed < PROMPT, "{elapsed:?}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["mlprof: interrupted after the program ended: report abandoned"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
