//! `mlprof sweep` (issue 18): a real program run at several sizes; each line's growth law
//! fitted and projected to a size that was not run, checked against a real run at that size;
//! a size that fails under a memory limit is reported and left out.

use mlprof::model::sweep::Sweep;
use scraper::{Html, Selector};

use crate::cpu::markers;
use crate::fixture::{self, os, within};

/// The memory limit the runs have (MiB of address space): N=20000 needs 3.2 GB for its
/// square, so it fails; N=8000 (512 MB) does not.
const LIMIT_MB: &str = "2500";

fn sweep(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> (std::process::Output, String) {
    let out = fixture::mlprof()
        .arg("sweep")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, stdout)
}

#[test]
fn growth_laws_are_fitted_and_projected_and_a_failed_size_is_reported() {
    let m = markers("growth.py");
    let script = fixture::script("growth.py");
    // One BLAS thread: OpenBLAS reserves address space per thread, which the limit counts.
    let env = [("MEM_LIMIT_MB", LIMIT_MB), ("OPENBLAS_NUM_THREADS", "1")];
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        let (out, json) = sweep(
            &[
                os("--param"),
                os("N=1000,2000,4000,20000"),
                os("--project"),
                os("N=8000"),
                os("--json"),
                os("--"),
                os(&py.exe),
                os(&script),
                os("{N}"),
            ],
            &env,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{v}: {stderr}");
        let s: Sweep = serde_json::from_str(&json).expect("a sweep document");
        assert_eq!(s.schema, "mlprof-sweep/1");
        assert_eq!((s.param.as_str(), s.values.len()), ("N", 4));
        let statuses: Vec<&str> = s.runs.iter().map(|r| r.status.as_str()).collect();
        assert_eq!(statuses, ["ok", "ok", "ok", "failed"], "{v}: {:?}", s.runs);
        assert_eq!(s.runs[3].exit_code, Some(1), "{v}: MemoryError");
        assert!(
            stderr.contains("sweep: N=20000: exit 1: not fitted"),
            "{v}: {stderr}"
        );

        let line = |n: u32| {
            s.lines
                .iter()
                .find(|l| l.line == n)
                .unwrap_or_else(|| panic!("{v}: line {n} in {:?}", s.lines))
        };
        let (square, linear) = (line(m["square"]), line(m["linear"]));
        assert!(
            within(square.memory_exponent.unwrap(), 2.0, 0.1),
            "{v}: {square:?}"
        );
        assert!(
            within(linear.memory_exponent.unwrap(), 1.0, 0.2),
            "{v}: {linear:?}"
        );
        assert!(square.memory_r2.unwrap() >= 0.95 && linear.memory_r2.unwrap() >= 0.95);
        assert!(
            within(square.alloc_exponent.unwrap(), 2.0, 0.1),
            "{v}: {square:?}"
        );
        assert_eq!(square.peak_bytes.len(), 4);
        assert_eq!(
            square.peak_bytes[3], None,
            "{v}: the failed run is no point"
        );
        assert_eq!(s.lines[0].line, m["square"], "{v}: largest projected first");

        // The real run at N=8000 against the projection.
        let real = fixture::profile_with_env(&[os(&py.exe), os(&script), os("8000")], &env);
        assert!(real.output.status.success(), "{v}");
        let held = |n: u32| {
            real.profile
                .lines
                .iter()
                .find(|l| l.line == n && l.file.ends_with("growth.py"))
                .map_or(0, |l| l.measures.peak_bytes) as f64
        };
        let projected = square.projected_peak_bytes.unwrap() as f64;
        assert!(
            within(projected, held(m["square"]), 0.15),
            "{v}: {projected} vs {}",
            held(m["square"])
        );
        assert!(within(projected, 8.0 * 8000.0 * 8000.0, 0.15), "{v}");
        let peak = s.projected_peak_bytes.unwrap() as f64;
        let truth = real.profile.memory.peak_heap_bytes as f64;
        assert!(
            within(peak, truth, 0.15),
            "{v}: whole peak {peak} vs {truth}"
        );
    }
}

#[test]
fn several_parameters_sweep_one_at_a_time_and_share_the_centre_run() {
    let m = markers("growth.py");
    let py = &fixture::numpy_pythons()[0];
    let dir = fixture::tempdir();
    let runs = dir.join("runs");
    let (out, text) = sweep(
        &[
            os("--param"),
            os("N=1000,2000,4000"),
            os("--param"),
            os("K=1000,4000,16000"),
            os("--runs-dir"),
            os(&runs),
            os("-o"),
            os(&dir.join("sweep.json")),
            os("--"),
            os(&py.exe),
            os(&fixture::script("growth.py")),
            os("{N}"),
            os("{K}"),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.is_empty(), "-o takes the report: {text}");
    let s: Sweep =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(s.more.len(), 1);
    let k = &s.more[0];
    assert_eq!(k.param, "K");
    assert_eq!(k.fixed.get("N").map(String::as_str), Some("1000"));
    assert_eq!(s.fixed.get("K").map(String::as_str), Some("1000"));
    let exponent = |s: &Sweep, line: u32| {
        s.lines
            .iter()
            .find(|l| l.line == line)
            .and_then(|l| l.memory_exponent)
            .unwrap_or(f64::NAN)
    };
    assert!(within(exponent(k, m["linear"]), 1.0, 0.2), "{:?}", k.lines);
    assert!(
        exponent(k, m["square"]).abs() < 0.2,
        "the square does not grow with K"
    );
    assert!(within(exponent(&s, m["square"]), 2.0, 0.1));
    // 3 + 3 values, the centre (N=1000, K=1000) run once: five profiles kept.
    let kept = fixture::dir_entries(&runs);
    assert_eq!(kept.len(), 5, "{kept:?}");
    assert!(s.runs.iter().chain(&k.runs).all(|r| r.profile.is_some()));
}

#[test]
fn the_page_plots_each_top_line_and_escapes_the_program_text() {
    let py = &fixture::numpy_pythons()[0];
    let (out, page) = sweep(
        &[
            os("--param"),
            os("N=1000,2000,4000"),
            os("--project"),
            os("N=8000"),
            os("--html"),
            os("--"),
            os(&py.exe),
            os(&fixture::script("growth.py")),
            os("{N}"),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = Html::parse_document(&page);
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    assert!(doc.select(&Selector::parse("svg circle").unwrap()).count() >= 6);
    assert_eq!(doc.select(&Selector::parse("b").unwrap()).count(), 0);
    assert_eq!(doc.select(&Selector::parse("script").unwrap()).count(), 0);
    assert!(page.contains("grows as N^2.0"), "{page}");
}

#[test]
fn bad_parameters_are_usage_errors_before_anything_runs() {
    let dir = fixture::tempdir();
    let marker = dir.join("ran");
    for bad in [
        ["--param", "N=1000"],
        ["--param", "N=a,b"],
        ["--project", "M=5"],
    ] {
        let mut args: Vec<&std::ffi::OsStr> = vec![os("--param"), os("N=1,2")];
        args.extend(bad.iter().map(os));
        args.extend([os("--"), os("touch"), os(&marker)]);
        let (out, _) = sweep(&args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!marker.exists(), "{bad:?}: nothing runs");
    }
    // A command that cannot start stops the sweep at once, with the shell's status.
    let (out, _) = sweep(
        &[
            os("--param"),
            os("N=1,2"),
            os("--"),
            os(&dir.join("missing")),
            os("{N}"),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert_eq!(
        stderr.matches("cannot run").count(),
        1,
        "one value tried: {stderr}"
    );
    // Every run failing is a failed sweep, after its report.
    let (out, text) = sweep(
        &[os("--param"), os("N=1,2"), os("--"), os("false"), os("{N}")],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(70),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("failed: exit 1").count(), 2, "{text}");
}

#[test]
fn the_readme_example_finds_its_quadratic_line() {
    let py = &fixture::numpy_pythons()[0];
    let script = fixture::root().join("examples/grow.py");
    let (out, json) = sweep(
        &[
            os("--param"),
            os("N=1000,2000,4000"),
            os("--project"),
            os("N=16000"),
            os("--json"),
            os("--"),
            os(&py.exe),
            os(&script),
            os("{N}"),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Sweep = serde_json::from_str(&json).unwrap();
    let top = &s.lines[0];
    assert!(top.source.contains("features @ features.T"), "{top:?}");
    assert!(within(top.memory_exponent.unwrap(), 2.0, 0.05), "{top:?}");
    // 8 * 16000^2 bytes.
    assert!(
        within(top.projected_peak_bytes.unwrap() as f64, 2.048e9, 0.1),
        "{top:?}"
    );
}

/// Issue 34: a command without `{N}` gets N only in its environment; mlprof says so before the
/// runs, and a table of lines left empty says why.
#[test]
fn a_command_without_its_placeholder_is_noted() {
    let py = &fixture::pythons()[0];
    let (out, text) = sweep(
        &[
            os("--param"),
            os("N=1,2"),
            os("--"),
            os(&py.exe),
            os("-c"),
            os("pass"),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let note = stderr
        .lines()
        .position(|l| l.starts_with("mlprof: sweep: the command has no {N}"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let first_run = stderr
        .lines()
        .position(|l| l.starts_with("mlprof: sweep: N=1"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(note < first_run, "said before the runs: {stderr}");
    let table = text
        .split("Lines (held")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    if table.lines().count() <= 2 {
        assert!(table.contains("(none: "), "an empty table says why: {text}");
    }
}
