//! The pytest plugin and the region API (issue 16), from the source tree (`python/`; the wheel
//! is checked by `scripts/wheel.sh`): `pytest --mlprof` re-runs pytest under mlprof, each
//! test's exact peak decides `limit_memory` / `limit_leaks`, a failing test names the lines
//! that held the memory, tests in xdist workers and forked children are measured, and
//! `mlprof.mark` regions appear in the profile with their exact figures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::cpu::markers;
use crate::fixture;

const MIB: f64 = 1048576.0;

/// The test module in a fresh directory as `test_limits.py`.
fn module_dir() -> PathBuf {
    let dir = fixture::tempdir();
    std::fs::copy(
        fixture::script("pytest_limits.py"),
        dir.join("test_limits.py"),
    )
    .unwrap();
    dir
}

fn pytest(python: &Path, dir: &Path, args: &[&str]) -> Output {
    let path = fixture::root().join("python");
    pytest_with_path(python, dir, args, path.to_str().unwrap())
}

/// `pytest` with the plugin, in `dir`, with `PYTHONPATH` set to `python_path`.
pub(crate) fn pytest_with_path(
    python: &Path,
    dir: &Path,
    args: &[&str],
    python_path: &str,
) -> Output {
    Command::new(python)
        .args([
            "-m",
            "pytest",
            "-p",
            "mlprof.pytest_plugin",
            "-p",
            "no:cacheprovider",
        ])
        .args(args)
        .current_dir(dir)
        .env("PYTHONPATH", python_path)
        .env("MLPROF_BIN", env!("CARGO_BIN_EXE_mlprof"))
        .env("MLPROF_GPU_TENSORS", "1") // as on a machine with a driver: fixture::mlprof
        .output()
        .expect("run pytest")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The outcomes pytest_limits.py has by construction, and the failures' lines.
fn check_outcomes(out: &Output, how: &str) {
    let all = text(out);
    assert_eq!(out.status.code(), Some(1), "{how}: {all}");
    for (test, outcome) in [
        ("test_big", "FAILED"),
        ("test_small", "PASSED"),
        ("test_unmarked", "PASSED"),
        ("test_leaks", "FAILED"),
        ("test_no_leak", "PASSED"),
        ("test_fork_big", "FAILED"),
    ] {
        assert!(
            all.contains(&format!("{outcome} test_limits.py::{test}")),
            "{how}: {test} should be {outcome}: {all}"
        );
    }
    let m = markers("pytest_limits.py");
    // The lines' figures are sampled: each holds its array exactly, and may hold a small
    // allocation sampled beside it (the array's object), which stands for about the mean,
    // 128 KiB. Two of them are allowed.
    for (marker, truth) in [("big", 100.0), ("leak", 4.0), ("child", 100.0)] {
        let named = format!("test_limits.py:{}  ", m[marker]);
        let figure = all
            .split(&named)
            .nth(1)
            .and_then(|rest| rest.split_once(" MiB"))
            .and_then(|(n, _)| n.trim().parse::<f64>().ok());
        assert!(
            figure.is_some_and(|f| (truth..=truth + 0.25).contains(&f)),
            "{how}: `{named}` should hold {truth} MiB (+2 samples of 128 KiB): {all}"
        );
    }
    assert!(
        all.contains("Test was limited to 50.0 MiB but allocated 100.0 MiB"),
        "{how}: {all}"
    );
    assert!(
        all.contains("in processes it started"),
        "{how}: the forked child's memory is named as such: {all}"
    );
    assert!(all.contains("top tests by peak heap"), "{how}: {all}");
}

#[test]
fn tests_over_their_limits_fail_naming_their_lines_on_every_python() {
    for py in fixture::spread(fixture::numpy_pythons()) {
        let dir = module_dir();
        let out = pytest(&py.exe, &dir, &["--mlprof", "-rA", "test_limits.py"]);
        check_outcomes(&out, &format!("CPython {}", py.minor));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn xdist_workers_measure_their_own_tests() {
    let py = &fixture::numpy_pythons()[0];
    let dir = module_dir();
    let out = pytest(
        &py.exe,
        &dir,
        &["--mlprof", "-rA", "-n", "2", "test_limits.py"],
    );
    check_outcomes(&out, "pytest -n 2");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Started under `mlprof run` already, `--mlprof` measures in place (no second mlprof).
#[test]
fn under_mlprof_run_the_plugin_measures_in_place() {
    let py = &fixture::numpy_pythons()[0];
    let dir = module_dir();
    let out = fixture::mlprof()
        .args(["run", "-q", "--"])
        .arg(&py.exe)
        .args([
            "-m",
            "pytest",
            "-p",
            "mlprof.pytest_plugin",
            "-p",
            "no:cacheprovider",
        ])
        .args(["--mlprof", "-rA", "test_limits.py"])
        .current_dir(&dir)
        .env("PYTHONPATH", fixture::root().join("python"))
        .env_remove("MLPROF_BIN")
        .output()
        .unwrap();
    check_outcomes(&out, "under mlprof run");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sizes as pytest-memray reads them: KB, MB and GB are powers of 1024, as KiB, MiB, GiB.
#[test]
fn limits_read_sizes_as_pytest_memray_does() {
    let py = &fixture::numpy_pythons()[0];
    let check = [
        "from mlprof.pytest_plugin import parse_size as p",
        "assert p('1 KB') == p('1KiB') == 1024",
        "assert p('24 MB') == p('24MiB') == 24 * 2**20",
        "assert p('1.5GB') == p('1.5 GiB') == 3 * 2**29",
        "assert p(4096) == p('4096') == p('4096B') == 4096",
        "for bad in ('lots', '-1 MB', '1 XB'):",
        "    try:",
        "        p(bad)",
        "    except ValueError:",
        "        pass",
        "    else:",
        "        raise SystemExit('accepted ' + bad)",
    ]
    .join("\n");
    let out = Command::new(&py.exe)
        .args(["-c", &check])
        .env("PYTHONPATH", fixture::root().join("python"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// Names from the program (a failing test's lines, test ids) are printed with their control
/// characters written visibly: none breaks a line of pytest's report or its JUnit XML.
#[test]
fn names_from_the_program_are_printed_clean() {
    let py = &fixture::numpy_pythons()[0];
    let check = [
        "from mlprof._format import clean",
        "from mlprof.pytest_plugin import _lines",
        "assert clean('t.py') == 't.py'",
        r"assert clean('\x1b]0;x\x07a\r\nb\u202ec\x85\td') == r'\x1b]0;x\x07a\x0d\x0ab\u{202e}c\u{85} d'",
        r"text = _lines('held', [{'file': '/w/e\x1b[2J\n.py', 'line': 3, 'bytes': 4096, 'function': 'f\u202e\r'}])",
        r"assert text == '\nheld (sampled):\n  /w/e\\x1b[2J\\x0a.py:3  4.0 KiB  f\\u{202e}\\x0d', repr(text)",
    ]
    .join("\n");
    let out = Command::new(&py.exe)
        .args(["-c", &check])
        .env("PYTHONPATH", fixture::root().join("python"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn without_the_flag_the_markers_change_nothing() {
    let py = &fixture::numpy_pythons()[0];
    let dir = module_dir();
    let out = pytest(&py.exe, &dir, &["-rA", "test_limits.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("top tests by peak"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_test_gets_a_region_a_page_and_junit_properties() {
    let py = &fixture::numpy_pythons()[0];
    let dir = module_dir();
    let out = pytest(
        &py.exe,
        &dir,
        &[
            "--mlprof",
            "--mlprof-html",
            "pages",
            "--mlprof-output",
            "session.json",
            "--junitxml",
            "junit.xml",
            "test_limits.py",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let profile =
        fixture::check_profile(&std::fs::read_to_string(dir.join("session.json")).unwrap());
    let names: Vec<&str> = profile.regions.iter().map(|r| r.name.as_str()).collect();
    for test in [
        "test_big",
        "test_small",
        "test_unmarked",
        "test_leaks",
        "test_no_leak",
        "test_fork_big",
    ] {
        let id = format!("test_limits.py::{test}");
        assert!(names.contains(&id.as_str()), "{id} not in {names:?}");
        let page = dir
            .join("pages")
            .join(format!("test_limits.py__{test}.html"));
        let html = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{page:?}: {e}"));
        assert!(html.contains("</html>"), "{page:?} is a whole page");
    }
    let big = profile
        .regions
        .iter()
        .find(|r| r.name == "test_limits.py::test_big")
        .unwrap();
    let peak = big.peak_bytes as f64 / MIB;
    assert!(
        (100.0..101.0).contains(&peak),
        "exact peak of test_big: {peak} MiB"
    );
    let line = markers("pytest_limits.py")["big"];
    assert_eq!(
        big.held_at_peak.first().map(|l| l.line),
        Some(line),
        "{big:?}"
    );
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert_eq!(
        junit.matches("name=\"mlprof_peak_bytes\"").count(),
        6,
        "{junit}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_limits_are_one_clear_usage_error() {
    let py = &fixture::numpy_pythons()[0];
    let dir = fixture::tempdir();
    std::fs::write(
        dir.join("test_bad.py"),
        "import pytest\n\n@pytest.mark.limit_memory('lots')\ndef test_x():\n    pass\n",
    )
    .unwrap();
    let out = pytest(&py.exe, &dir, &["--mlprof", "test_bad.py"]);
    let all = text(&out);
    assert_ne!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("limit_memory: not a size: 'lots'"), "{all}");
    assert!(!all.contains("Traceback"), "{all}");
    let out = pytest(
        &py.exe,
        &dir,
        &["--mlprof", "--mlprof-budget", "x1", "test_bad.py"],
    );
    let all = text(&out);
    assert_eq!(
        out.status.code(),
        Some(4),
        "pytest's usage error status: {all}"
    );
    assert!(all.contains("--mlprof-budget: not a size: 'x1'"), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn marked_regions_carry_their_exact_peaks_and_lines_on_every_python() {
    let m = markers("marks.py");
    for py in fixture::spread(fixture::numpy_pythons()) {
        let run = fixture::profile_with_env(
            &[py.exe.as_os_str(), fixture::script("marks.py").as_os_str()],
            &[(
                "PYTHONPATH",
                fixture::root().join("python").to_str().unwrap(),
            )],
        );
        let stdout = String::from_utf8_lossy(&run.output.stdout).into_owned();
        let region = |name: &str| {
            run.profile
                .regions
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| {
                    panic!("{}: no region {name}: {:?}", py.minor, run.profile.regions)
                })
        };
        let mib = |b: u64| b as f64 / MIB;
        let (load, inner, build) = (region("load"), region("inner"), region("build"));
        assert!((80.0..80.5).contains(&mib(load.peak_bytes)), "{load:?}");
        assert!(
            (50.0..50.5).contains(&(load.end_bytes as f64 / MIB)),
            "{load:?}"
        );
        assert!((30.0..30.5).contains(&mib(inner.peak_bytes)), "{inner:?}");
        assert!(inner.end_bytes.abs() < 65536, "{inner:?}");
        assert!((40.0..40.5).contains(&mib(build.peak_bytes)), "{build:?}");
        let lines = |r: &mlprof::model::regions::Region| -> Vec<u32> {
            r.held_at_peak.iter().map(|l| l.line).collect()
        };
        assert_eq!(lines(load)[..2], [m["data"], m["tmp"]], "{load:?}");
        assert_eq!(lines(build)[0], m["parts"], "{build:?}");
        assert!(region("sum").ended && load.duration_s > 0.0);
        // What the program learnt at once is what the profile says.
        let printed: Vec<&str> = stdout.split_whitespace().collect();
        assert_eq!(printed[1], "True", "{stdout}");
        assert_eq!(printed[2], load.peak_bytes.to_string(), "{stdout}");
        assert_eq!(printed[3], load.end_bytes.to_string(), "{stdout}");
        let report = mlprof_text(&run.profile);
        assert!(report.contains("Regions (4 marked"), "{report}");
    }
    // Outside mlprof the marks are no-ops.
    let py = &fixture::numpy_pythons()[0];
    let out = Command::new(&py.exe)
        .arg(fixture::script("marks.py"))
        .env("PYTHONPATH", fixture::root().join("python"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with("False None None\n"),
        "{}",
        text(&out)
    );
}

fn mlprof_text(p: &mlprof::model::Profile) -> String {
    mlprof::render::text::render(p)
}

#[test]
fn a_region_may_end_before_one_opened_inside_it_by_another_thread() {
    for py in fixture::spread(fixture::numpy_pythons()) {
        let run = fixture::profile_with_env(
            &[
                py.exe.as_os_str(),
                fixture::script("marks_threads.py").as_os_str(),
            ],
            &[(
                "PYTHONPATH",
                fixture::root().join("python").to_str().unwrap(),
            )],
        );
        let stdout = String::from_utf8_lossy(&run.output.stdout).into_owned();
        let printed: Vec<f64> = stdout
            .split_whitespace()
            .map(|n| n.parse::<f64>().unwrap() / MIB)
            .collect();
        let within = |got: f64, want: f64| (want..want + 0.5).contains(&got);
        assert!(
            within(printed[0], 40.0) && within(printed[1], 30.0) && within(printed[2], 5.0),
            "CPython {}: peaks a, b, after (MiB): {printed:?}",
            py.minor
        );
        for (name, want) in [("a", 40.0), ("b", 30.0), ("after", 5.0)] {
            let r = run.profile.regions.iter().find(|r| r.name == name).unwrap();
            assert!(r.ended, "{r:?}");
            assert!(within(r.peak_bytes as f64 / MIB, want), "{r:?}");
        }
    }
}
