//! `mlprof diff` (issue 18): two real runs compared; the line that grew is first with its
//! change, and two runs of an unchanged program show nothing above the noise floor.

use mlprof::model::diff::Diff;
use scraper::{Html, Selector};

use crate::cpu::markers;
use crate::fixture::{self, os, within};

/// `mlprof run -o DIR/NAME.json -- python SCRIPT ARGS...`, the path of the profile.
fn saved(
    py: &fixture::Python,
    dir: &std::path::Path,
    name: &str,
    script: &str,
    args: &[&str],
) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.json"));
    let script = fixture::script_or_example(script);
    let mut program = vec![os(&py.exe), os(&script)];
    program.extend(args.iter().map(os));
    fixture::run_to(&path, &program, &[]);
    path
}

fn diff(args: &[&std::ffi::OsStr]) -> (std::process::Output, String) {
    let out = fixture::mlprof().arg("diff").args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, stdout)
}

#[test]
fn the_line_that_grew_comes_first_with_its_change() {
    let m = markers("growth.py");
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        let dir = fixture::tempdir();
        let base = saved(py, &dir, "base", "growth.py", &["1000"]);
        let new = saved(py, &dir, "new", "growth.py", &["3000"]);
        let (out, json) = diff(&[os("--json"), os(&base), os(&new)]);
        assert!(
            out.status.success(),
            "{v}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let d: Diff = serde_json::from_str(&json).expect("a diff document");
        assert_eq!(d.schema, "mlprof-diff/1");
        let first = &d.lines[0];
        assert_eq!(first.line, m["square"], "{v}: {:?}", d.lines);
        // 8 * (3000^2 - 1000^2) bytes more held at the peak, and allocated.
        let truth = 8.0 * (9e6 - 1e6);
        assert!(
            within(first.peak_bytes_delta as f64, truth, 0.10),
            "{v}: {first:?}"
        );
        assert!(
            within(first.alloc_bytes_delta as f64, truth, 0.10),
            "{v}: {first:?}"
        );
        assert_eq!(first.status.as_str(), "changed");
        assert!(first.source.contains("np.ones((n, n))"), "{v}: {first:?}");
        let second = &d.lines[1];
        assert_eq!(second.line, m["linear"], "{v}: {:?}", d.lines);
        assert!(
            within(second.peak_bytes_delta as f64, 8000.0 * 2000.0, 0.10),
            "{v}: {second:?}"
        );
        assert!(d.memory.peak_heap_bytes.meaningful);
        assert!(
            within(
                d.memory.peak_heap_bytes.delta,
                8.0 * (9e6 - 1e6) + 8000.0 * 2000.0,
                0.05
            ),
            "{v}: {:?}",
            d.memory
        );
        assert!(
            d.functions.first().is_some_and(|f| f.function == "build"),
            "{v}: {:?}",
            d.functions
        );

        // The terminal table names the line and its change; the page is well formed, with
        // the program's text escaped.
        let (out, text) = diff(&[os(&base), os(&new)]);
        assert!(out.status.success());
        let row = text
            .lines()
            .find(|l| l.contains(&format!("growth.py:{}", m["square"])))
            .unwrap_or_else(|| panic!("{v}: {text}"));
        assert!(row.contains("+61.0 MiB"), "{v}: {row}");
        let page = dir.join("diff.html");
        let (out, _) = diff(&[os(&base), os(&new), os("-o"), os(&page)]);
        assert!(out.status.success());
        let html = std::fs::read_to_string(&page).unwrap();
        let doc = Html::parse_document(&html);
        assert!(doc.errors.is_empty(), "{v}: {:?}", doc.errors);
        assert_eq!(
            doc.select(&Selector::parse("b").unwrap()).count(),
            0,
            "{v}: source escaped"
        );
        assert!(
            html.contains("&lt;b&gt;this&lt;&#x2F;b&gt;")
                || html.contains("&lt;b&gt;this&lt;/b&gt;"),
            "{v}"
        );
        let highlighted = doc.select(&Selector::parse("tr.grew").unwrap()).count();
        assert!(highlighted >= 2, "{v}: {highlighted} rows highlighted");
    }
}

#[test]
fn two_runs_of_an_unchanged_program_differ_only_within_noise() {
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        let dir = fixture::tempdir();
        let a = saved(py, &dir, "a", "growth.py", &["2000"]);
        let b = saved(py, &dir, "b", "growth.py", &["2000"]);
        let (out, json) = diff(&[os("--json"), os(&a), os(&b)]);
        assert!(out.status.success(), "{v}");
        let d: Diff = serde_json::from_str(&json).unwrap();
        // No byte figure moves; time may, on a busy machine, where a line's waiting (an
        // import's reads, its page faults) is what the other programs leave it: once, under
        // load, `import numpy` waited 0.65 s less in one run than in the other. So may the
        // line holding OpenBLAS's 32 MiB buffer (mapped by its own thread, charged to the
        // line the Python thread was last sampled on: an earlier one when the timers fire
        // late, or `<native thread>` when it had none).
        for l in d.lines.iter().chain(&d.functions) {
            assert!(
                l.meaningful
                    .iter()
                    .all(|m| *m == "cpu_s" || *m == "mapped_peak_bytes"),
                "{v}: {l:#?}"
            );
        }
        assert!(
            d.unchanged_lines >= 3,
            "{v}: {} lines compared",
            d.unchanged_lines
        );
        assert!(!d.memory.peak_heap_bytes.meaningful, "{v}: {:?}", d.memory);

        // CPU in Python and native code, small objects sampled, a large array: no heap
        // figure moves beyond its sampling noise (time may, on a busy machine: page faults of
        // a 240 MB array cost what the machine makes them cost; and so, there, may the mapped
        // memory a line holds at the mapped peak: once, under load, `import numpy`'s 32 MiB
        // OpenBLAS buffer was held there in one run and not in the other, a moment's figure
        // not yet understood).
        let a = saved(py, &dir, "qa", "quickstart.py", &[]);
        let b = saved(py, &dir, "qb", "quickstart.py", &[]);
        let (_, json) = diff(&[os("--json"), os(&a), os(&b)]);
        let d: Diff = serde_json::from_str(&json).unwrap();
        for l in d.lines.iter().chain(&d.functions) {
            assert!(
                l.meaningful
                    .iter()
                    .all(|m| *m == "cpu_s" || *m == "mapped_peak_bytes"),
                "{v}: {l:#?}"
            );
        }
        assert!(d.unchanged_lines >= 2, "{v}");
    }
}

#[test]
fn a_moved_line_is_the_same_line_and_the_baseline_gate_agrees() {
    let py = &fixture::numpy_pythons()[0];
    let dir = fixture::tempdir();
    let original = std::fs::read_to_string(fixture::script("growth.py")).unwrap();
    let script = dir.join("growth.py");
    std::fs::write(&script, &original).unwrap();
    let run = |name: &str, n: &str, extra: &[&str]| {
        let path = dir.join(format!("{name}.json"));
        let out = fixture::mlprof()
            .args(["run", "-q", "-o"])
            .arg(&path)
            .args(extra)
            .arg("--")
            .arg(&py.exe)
            .arg(&script)
            .arg(n)
            .output()
            .unwrap();
        (out, path)
    };
    let (_, base) = run("base", "2000", &[]);
    // Three lines inserted above: every line moves, none changes.
    std::fs::write(&script, format!("x = 1\ny = 2\nz = 3\n{original}")).unwrap();
    let (out, moved) = run("moved", "2000", &["--baseline", base.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "moved lines are no regression: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, json) = diff(&[os("--json"), os(&base), os(&moved)]);
    let d: Diff = serde_json::from_str(&json).unwrap();
    // Every line is matched to itself three lines up, and none changed in memory. Its time
    // may: on a loaded machine `import numpy` once waited 0.66 s for its files in one run and
    // 0.03 s in the other, a real change in the machine, not in the program.
    for l in &d.lines {
        // A pool thread's mapping may be held by another line in the other run (see above):
        // that line is then new or gone with nothing else.
        let moved_mapping = l
            .meaningful
            .iter()
            .all(|m| *m == "cpu_s" || *m == "mapped_peak_bytes")
            && l.meaningful.iter().any(|m| *m == "mapped_peak_bytes");
        assert!(
            moved_mapping
                || (l.status.as_str() == "changed"
                    && l.base_line.is_some_and(|b| b + 3 == l.line)
                    && l.meaningful.iter().all(|m| *m == "cpu_s")),
            "{l:#?}"
        );
    }
    // Grown at its new place: the gate names the new line number.
    let (out, _) = run("grown", "4000", &["--baseline", base.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(97), "{stderr}");
    let square = markers("growth.py")["square"] + 3;
    assert!(
        stderr.contains(&format!("regression: growth.py:{square} held at the peak")),
        "{stderr}"
    );
    let grown = dir.join("grown.json");
    let (_, text) = diff(&[os(&base), os(&grown)]);
    assert!(
        text.contains(&format!("growth.py:{square} (was {})", square - 3)),
        "{text}"
    );
}

#[test]
fn unreadable_profiles_are_one_line_errors() {
    let dir = fixture::tempdir();
    let not_json = dir.join("x.json");
    std::fs::write(&not_json, "{\"schema\": 3").unwrap();
    for args in [
        vec![os(&dir.join("missing.json")), os(&not_json)],
        vec![os(&not_json), os(&not_json)],
    ] {
        let (out, _) = diff(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0));
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("mlprof: "), "{stderr}");
    }
}
