//! Everything read from a profiled program is untrusted ("Trust on a busy, hostile machine"):
//! names it controls never reach a terminal raw, whichever command prints them, and the
//! environment cannot steer where `-o` writes.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::fixture::{self, os};

/// ESC (a colour sequence), BEL, a right-to-left override, a carriage return and a newline,
/// as `hostile_names.py` puts them into its names.
const EVIL: &str = "zzhead\x1b[31m\x07\u{202e}\r\nzztail";

/// Neither stdout nor stderr of `out` holds a raw ESC, BEL, CR or U+202E, nor a newline inside
/// a name (a line holding `zztail` without the `zzhead` before it).
fn assert_clean(what: &str, out: &Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        for bad in ['\x1b', '\x07', '\r', '\u{202e}'] {
            assert!(
                !text.contains(bad),
                "{what}: {stream} holds {bad:?} raw:\n{}",
                text.escape_debug()
            );
        }
        for line in text.lines() {
            if let Some(i) = line.find("zztail") {
                assert!(
                    line[..i].contains("zzhead"),
                    "{what}: {stream}: a newline inside a name:\n{text}"
                );
            }
        }
    }
}

fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run mlprof")
}

fn mlprof(args: &[&OsStr]) -> Output {
    output(fixture::mlprof().args(args))
}

/// `hostile_names.py N EVIL` under `mlprof run OPTIONS`.
fn run(py: &fixture::Python, n: &str, options: &[&OsStr], env: &[(&str, &OsStr)]) -> Output {
    let script = fixture::script("hostile_names.py");
    let python = fixture::root().join("python");
    let env = [&[("PYTHONPATH", python.as_os_str())], env].concat();
    fixture::run(options, &[os(&py.exe), os(&script), os(n), os(EVIL)], &env)
}

fn says(out: &Output) -> String {
    format!(
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).escape_debug()
    )
}

#[test]
fn names_with_control_characters_never_reach_a_terminal_raw() {
    let py = fixture::pythons().last().expect("a Python");
    let dir = fixture::tempdir();
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    for (n, path) in [("8", &a), ("40", &b)] {
        let out = run(py, n, &[os("-o"), os(path)], &[]);
        assert!(out.status.success(), "{}", says(&out));
        assert_clean("run -o", &out);
    }
    let p = fixture::check_profile(&std::fs::read_to_string(&a).unwrap());
    assert!(
        p.lines.iter().any(|l| l.file.contains(EVIL)) && p.regions.iter().any(|r| r.name == EVIL),
        "the names are in the profile as the program gave them"
    );

    // `run` printing its report, the budget verdicts and GitHub's annotations, writing the job
    // summary and JUnit XML; its region pages go where a link was planted at one's name.
    let (summary, junit) = (dir.join("summary.md"), dir.join("budgets.xml"));
    let (pages, victim) = (dir.join("pages"), dir.join("victim.txt"));
    std::fs::create_dir(&pages).unwrap();
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, pages.join("plain.html")).unwrap();
    let out = run(
        py,
        "8",
        &[
            os("--max-peak"),
            os("1KiB"),
            os("--regions-html"),
            os(&pages),
            os("--junit"),
            os(&junit),
        ],
        &[
            ("GITHUB_ACTIONS", os("true")),
            ("GITHUB_STEP_SUMMARY", os(&summary)),
        ],
    );
    assert_eq!(out.status.code(), Some(97), "{}", says(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("zzhead"),
        "the report names the file: {}",
        says(&out)
    );
    assert_clean("run", &out);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    for page in fixture::dir_entries(&pages) {
        use std::os::unix::fs::PermissionsExt;
        assert!(
            !page.contains(|c: char| c.is_control() || c == '\u{202e}'),
            "{page:?}"
        );
        let meta = std::fs::symlink_metadata(pages.join(&page)).unwrap();
        assert!(meta.is_file(), "{page}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{page}");
    }
    assert!(std::fs::read_to_string(pages.join("plain.html"))
        .unwrap()
        .contains("<html"));
    let summary = std::fs::read_to_string(&summary).unwrap();
    assert!(
        !summary.chars().any(|c| c.is_control() && c != '\n') && !summary.contains('\u{202e}'),
        "{}",
        summary.escape_debug()
    );
    let row = summary
        .lines()
        .find(|l| l.starts_with("| peak_heap |"))
        .unwrap_or_else(|| panic!("no table row: {summary}"));
    assert!(row.contains("zzhead"), "{row}");
    // Parsed by Python's XML parser, which refuses what XML 1.0 forbids.
    let parse = Command::new(&py.exe)
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; \
             print(E.parse(sys.argv[1]).getroot().get('failures'))",
        ])
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&parse.stdout),
        "1\n",
        "{}",
        String::from_utf8_lossy(&parse.stderr)
    );

    let report = mlprof(&[os("report"), os(&a)]);
    assert!(report.status.success(), "{}", says(&report));
    let text = String::from_utf8_lossy(&report.stdout);
    // The file, the function (under "CPU by function") and the region are named.
    assert!(text.matches("zzhead").count() >= 3, "{text}");
    assert_clean("report", &report);

    for (x, y) in [(&a, &b), (&a, &a)] {
        let out = mlprof(&[os("diff"), os(x), os(y)]);
        assert!(out.status.success(), "{}", says(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("zzhead"));
        assert_clean("diff", &out);
    }

    let out = mlprof(&[os("check"), os(&a), os("--max-peak"), os("1KiB")]);
    assert_eq!(out.status.code(), Some(97), "{}", says(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("zzhead"));
    assert_clean("check --max-peak", &out);
    let out = mlprof(&[os("check"), os(&b), os("--baseline"), os(&a)]);
    assert_eq!(out.status.code(), Some(97), "{}", says(&out));
    assert_clean("check --baseline", &out);

    let out = output(
        fixture::mlprof()
            .args(["sweep", "--param", "N=4,16", "--"])
            .arg(&py.exe)
            .arg(fixture::script("hostile_names.py"))
            .arg("{N}")
            .arg(EVIL),
    );
    assert!(out.status.success(), "{}", says(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("zzhead"));
    assert_clean("sweep", &out);

    // Errors that quote a path.
    let missing = dir.join(format!("{EVIL}.json"));
    let unwritable = dir.join(EVIL).join("r.txt");
    for args in [
        vec![os("report"), os(&missing)],
        vec![os("report"), os(&a), os("-o"), os(&unwritable)],
        vec![os("diff"), os(&a), os(&b), os("-o"), os(&unwritable)],
    ] {
        let out = mlprof(&args);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
        assert_clean("an error", &out);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `dir` holds, recursively, as paths relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_rank_of_dot_dot_in_the_environment_writes_no_file_outside_the_directory() {
    let dir = fixture::tempdir();
    let runs = dir.join("runs");
    for sub in ["_", "__", "a_b"] {
        std::fs::create_dir_all(runs.join(sub)).unwrap();
    }
    for (rank, template) in [
        ("..", "{rank}/p.json"),
        (".", "{rank}/q.json"),
        ("a/b", "{rank}/r.json"),
        ("\x1b[2J\n", "{rank}s.json"),
    ] {
        let out = output(
            fixture::mlprof()
                .args(["run", "-q", "-o"])
                .arg(runs.join(template))
                .args(["--", "true"])
                .env("RANK", rank),
        );
        assert!(out.status.success(), "RANK={rank:?}: {}", says(&out));
    }
    // `..`, `.` and `/` became `_`: each file is in the directory its template names.
    assert_eq!(
        tree(&dir),
        [
            "runs",
            "runs/_",
            "runs/_/q.json",
            "runs/_[2J_s.json",
            "runs/__",
            "runs/__/p.json",
            "runs/a_b",
            "runs/a_b/r.json"
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn jupyter_install_takes_no_directory_name_and_imports_nothing_from_the_working_directory() {
    let dir = fixture::tempdir();
    let data = dir.join("data");
    for name in ["..", ".", "-", "a/b", "k\x1b[2J"] {
        let out = output(
            fixture::mlprof()
                .args(["jupyter", "install", "--user", "--name", name])
                .env("JUPYTER_DATA_DIR", &data),
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "--name {name:?}: {}",
            says(&out)
        );
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
        assert_clean("jupyter install --name", &out);
    }
    // An `ipykernel.py` planted in the working directory is not what the Python runs.
    let cwd = dir.join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let marker = dir.join("imported");
    std::fs::write(
        cwd.join("ipykernel.py"),
        format!("open({:?}, 'w').close()\n", marker.display().to_string()),
    )
    .unwrap();
    let py = fixture::pythons().last().expect("a Python");
    let _ = output(
        fixture::mlprof()
            .args(["jupyter", "install", "--user", "--python"])
            .arg(&py.exe)
            .current_dir(&cwd)
            .env("JUPYTER_DATA_DIR", &data),
    );
    assert!(!marker.exists(), "the planted ipykernel.py ran");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program given megabytes on its command line (15 arguments of 100 kB): the JSON profile
/// keeps them whole (the run's command), the text report shows each cut to its first 80
/// characters and its length, and stays small and quick to write. (The HTML page carries the
/// profile for its script, the whole command in it.)
#[test]
fn megabytes_of_arguments_are_kept_in_the_profile_and_cut_in_reports() {
    let py = &fixture::pythons()[0];
    let big = "a".repeat(100_000); // under the kernel's 128 KiB for one argument
    let mut argv = vec![os(&py.exe), os("-c"), os("pass")];
    argv.extend(std::iter::repeat_n(os(&big), 15));
    let run = fixture::profile_args(&[], &argv, &[]);
    // The run's command is mlprof's own argv, whole (a process's own is what its first 4 KiB
    // of /proc/PID/cmdline hold).
    assert_eq!(run.profile.command.len(), 18);
    assert!(run.profile.command[17] == big);
    let text = mlprof::render::text::render(&run.profile);
    assert!(
        text.len() < 16 * 1024,
        "text report of {} bytes",
        text.len()
    );
    assert!(
        text.contains("(100000 bytes)"),
        "{}",
        &text[..2000.min(text.len())]
    );
}
