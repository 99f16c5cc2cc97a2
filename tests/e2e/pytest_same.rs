//! `pytest --mlprof` runs the same tests the same way (issue 46): the same interpreter flags
//! (`-O`, `-W`, `-X`, `-P`), the same `sys.path` (`python -m pytest` against the `pytest`
//! script), a conftest that changes directory, imported once, and `coverage run -m pytest`
//! still measuring the tests. Each command runs with and without `--mlprof`; the verdicts, the
//! exit status and the conftest's imports must be the same (`tests/scripts/pytest_same/`, whose
//! tests pass or fail by how the interpreter was started).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::fixture;

/// A fresh copy of the test project.
fn project() -> PathBuf {
    let dir = fixture::tempdir().join("project");
    let src = fixture::root().join("tests/scripts/pytest_same");
    for rel in [
        "tests/conftest.py",
        "helper_in_cwd.py",
        "tests/test_same.py",
        "sub/.keep",
    ] {
        let to = dir.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), to).unwrap();
    }
    dir
}

/// What one pytest run decided: its verdicts, its status, how many times the conftest was
/// imported, and its output (for messages).
struct Verdicts {
    tests: BTreeSet<(String, String)>,
    status: Option<i32>,
    conftest_imports: usize,
    text: String,
}

/// `argv` (a pytest command line) in a fresh copy of the project, with `extra` appended.
fn run(argv: &[&str], extra: &[&str], env: &[(&str, &str)]) -> (Verdicts, PathBuf) {
    let dir = project();
    let imports = dir.join("imports.txt");
    let out: Output = Command::new(argv[0])
        .args(&argv[1..])
        .args([
            "-p",
            "mlprof.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-rA",
        ])
        .args(extra)
        .arg("tests")
        .current_dir(&dir)
        .env("PYTHONPATH", fixture::root().join("python"))
        .env("MLPROF_BIN", env!("CARGO_BIN_EXE_mlprof"))
        .env("MLPROF_GPU_TENSORS", "1") // the PyTorch hook in: fixture::mlprof
        .env("SAME_IMPORTS", &imports)
        .envs(env.iter().copied())
        .env_remove("PYTHONSAFEPATH")
        .env_remove("PYTHONWARNINGS")
        .env_remove("PYTHONDEVMODE")
        .env_remove("PYTHONOPTIMIZE")
        .env_remove("PYTEST_ADDOPTS")
        .stdin(Stdio::null())
        .output()
        .expect("run pytest");
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tests = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let outcome = words.next()?;
            let id = words.next()?;
            (["PASSED", "FAILED", "ERROR"].contains(&outcome) && id.contains("::"))
                .then(|| (id.to_string(), outcome.to_string()))
        })
        .collect();
    let conftest_imports = std::fs::read_to_string(&imports)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let verdicts = Verdicts {
        tests,
        status: out.status.code(),
        conftest_imports,
        text,
    };
    (verdicts, dir)
}

fn outcome<'a>(v: &'a Verdicts, test: &str) -> &'a str {
    v.tests
        .iter()
        .find(|(id, _)| id.ends_with(&format!("::{test}")))
        .map_or("missing", |(_, o)| o.as_str())
}

/// The same command with and without `--mlprof`: the same verdicts, status and imports.
fn same(how: &str, argv: &[&str], env: &[(&str, &str)]) -> (Verdicts, PathBuf, PathBuf) {
    let (plain, plain_dir) = run(argv, &[], env);
    let (profiled, profiled_dir) = run(argv, &["--mlprof"], env);
    assert_eq!(plain.tests.len(), 5, "{how}: {}", plain.text);
    assert_eq!(
        profiled.tests, plain.tests,
        "{how}: verdicts\n{}\n=== without mlprof ===\n{}",
        profiled.text, plain.text
    );
    assert_eq!(profiled.status, plain.status, "{how}: {}", profiled.text);
    assert_eq!(plain.conftest_imports, 1, "{how}: {}", plain.text);
    assert_eq!(
        profiled.conftest_imports, 1,
        "{how}: the conftest imported once: {}",
        profiled.text
    );
    assert!(
        profiled.text.contains("top tests by peak heap"),
        "{how}: measured: {}",
        profiled.text
    );
    (profiled, plain_dir, profiled_dir)
}

fn script(python: &Path, name: &str) -> String {
    python.with_file_name(name).to_str().unwrap().to_string()
}

#[test]
fn pytest_keeps_the_interpreters_flags_its_path_and_one_conftest_import() {
    for py in fixture::spread(fixture::numpy_pythons()) {
        let python = py.exe.to_str().unwrap();
        let v = &py.minor;
        // -O sets sys.flags.optimize, -W makes the warning an error, -X dev turns dev mode on.
        let flags = [
            python,
            "-O",
            "-W",
            "error::DeprecationWarning",
            "-X",
            "dev",
            "-m",
            "pytest",
        ];
        let (got, _, _) = same(&format!("{v} -O -W -X -m pytest"), &flags, &[]);
        for (test, want) in [
            ("test_optimize_is_on_only_with_O", "PASSED"),
            ("test_a_deprecation_is_an_error_only_with_W", "FAILED"),
            ("test_dev_mode_is_on_only_with_X_dev", "PASSED"),
            (
                "test_the_starting_directory_is_importable_only_with_m",
                "PASSED",
            ),
            ("test_the_conftest_moved_the_tests_into_sub", "PASSED"),
        ] {
            assert_eq!(outcome(&got, test), want, "{v}: {test}: {}", got.text);
        }
        // The `pytest` script: the starting directory is not on sys.path.
        let pytest = script(&py.exe, "pytest");
        let (got, _, _) = same(&format!("{v} the pytest script"), &[&pytest], &[]);
        assert_eq!(
            outcome(
                &got,
                "test_the_starting_directory_is_importable_only_with_m"
            ),
            "FAILED",
            "{v}: {}",
            got.text
        );
        assert_eq!(
            outcome(&got, "test_a_deprecation_is_an_error_only_with_W"),
            "PASSED"
        );
        // -P (3.11+): `-m pytest` without the starting directory on sys.path.
        let minor: u32 = v.trim_end_matches('t')[2..].parse().unwrap();
        if minor >= 11 {
            let (got, _, _) = same(&format!("{v} -P"), &[python, "-P", "-m", "pytest"], &[]);
            assert_eq!(
                outcome(
                    &got,
                    "test_the_starting_directory_is_importable_only_with_m"
                ),
                "FAILED",
                "{v}: {}",
                got.text
            );
        }
    }
}

#[test]
fn coverage_run_m_pytest_mlprof_still_measures_the_tests() {
    for py in fixture::spread(fixture::numpy_pythons()) {
        let python = py.exe.to_str().unwrap();
        let v = &py.minor;
        let has = Command::new(python)
            .args(["-c", "import coverage"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !has {
            fixture::skipped(&format!(
                "skipped on {v}: no coverage in its venv (scripts/pythons.sh installs it)"
            ));
            continue;
        }
        let argv = [python, "-m", "coverage", "run", "-m", "pytest"];
        let (_, plain_dir, profiled_dir) = same(&format!("{v} coverage run"), &argv, &[]);
        // coverage wrote its data where the tests ran, and reports the same lines run.
        let report = |dir: &Path| {
            let out = Command::new(python)
                .args(["-m", "coverage", "report", "--show-missing"])
                .arg("--omit=*/python/mlprof/*") // the plugin's own lines differ, by design
                .current_dir(dir)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let (plain, profiled) = (report(&plain_dir), report(&profiled_dir));
        assert!(plain.contains("test_same.py"), "{v}: {plain}");
        assert_eq!(profiled, plain, "{v}: coverage of the tests");
    }
}
