//! Real ML frameworks' thread pools (issue 15): scikit-learn's OpenMP estimators and
//! onnxruntime's intra-op pool, run with `target/bench-venv`'s Python when it has them (see
//! bench/README.md: `python3 bench/run.py --install`); each test says it skipped otherwise.
//! What the report must do: charge the pool threads' CPU to the line that called the library,
//! leave (almost) nothing on `<native thread>`, and name the library's functions.

use mlprof::model::{LineStats, Profile};

use crate::cpu::{line, markers};
use crate::fixture::{self, os};

/// The benchmark venv's Python, if it can import `modules`.
pub fn framework_python(modules: &str) -> Option<std::path::PathBuf> {
    let python = fixture::root().join("target/bench-venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "skipped: {modules} not importable by target/bench-venv (bench/run.py --install)"
        );
    }
    ok.then_some(python)
}

fn cpu(l: &LineStats) -> f64 {
    l.measures.cpu_python_s + l.measures.cpu_native_s
}

fn pseudo(p: &Profile, file: &str) -> f64 {
    p.lines.iter().filter(|l| l.file == file).map(cpu).sum()
}

/// The pool lines hold what the pool did: at least 80% of the CPU that is theirs or was left
/// unattributed, at least half of the process's CPU, and `<native thread>` at most 5% of it.
fn pool_lines_hold_the_pool(p: &Profile, pool: &[&LineStats], what: &str) {
    let all: f64 = p.lines.iter().map(cpu).sum();
    let on_lines: f64 = pool.iter().map(|l| cpu(l)).sum();
    let native_thread = pseudo(p, "<native thread>");
    let outside = pseudo(p, "<outside profiled code>");
    assert!(
        on_lines >= 0.8 * (on_lines + native_thread + outside),
        "{what}: {on_lines:.2} s on the lines, {native_thread:.2} s on <native thread>, \
         {outside:.2} s outside profiled code"
    );
    assert!(
        on_lines >= 0.5 * all,
        "{what}: {on_lines:.2} s of {all:.2} s"
    );
    assert!(
        native_thread <= 0.05 * all,
        "{what}: <native thread> {native_thread:.2} s of {all:.2} s"
    );
}

#[test]
fn scikit_learn_openmp_estimators_are_charged_to_their_fit_lines() {
    let Some(python) = framework_python("sklearn") else {
        return;
    };
    let script = fixture::script("sklearn_job.py");
    let run = fixture::profile(&[os(&python), os(&script)]);
    assert!(run.output.status.success());
    let p = &run.profile;
    let m = markers("sklearn_job.py");
    let gbm = line(p, "sklearn_job.py", m["fit-gbm"]);
    let kmeans = line(p, "sklearn_job.py", m["fit-kmeans"]);
    pool_lines_hold_the_pool(p, &[gbm, kmeans], "scikit-learn");
    for l in [gbm, kmeans] {
        assert!(cpu(l) > 0.2, "{}: {:?}", l.line, l.measures);
        assert!(
            l.measures
                .native
                .iter()
                .any(|n| !n.symbol.starts_with("0x")),
            "line {}: native functions named: {:?}",
            l.line,
            l.measures.native
        );
    }
    let data = line(p, "sklearn_job.py", m["data"]);
    let held = data.measures.peak_bytes as f64;
    assert!(
        fixture::within(held, 32e6, 0.15),
        "the data line holds X (32 MB): {held}"
    );
}

#[test]
fn onnxruntime_intra_op_pool_is_charged_to_the_run_line() {
    let Some(python) = framework_python("onnx, onnxruntime") else {
        return;
    };
    let script = fixture::script("onnx_job.py");
    let run = fixture::profile(&[os(&python), os(&script), os("2")]);
    assert!(run.output.status.success());
    let p = &run.profile;
    let m = markers("onnx_job.py");
    let session_run = line(p, "onnx_job.py", m["run"]);
    pool_lines_hold_the_pool(p, &[session_run], "onnxruntime");
    let natives = &session_run.measures.native;
    assert!(
        natives
            .iter()
            .any(|n| n.library.contains("onnxruntime") && !n.symbol.starts_with("0x")),
        "onnxruntime's kernels named under the run line: {natives:?}"
    );
    assert!(
        session_run.measures.cpu_native_s >= 0.8 * cpu(session_run),
        "the run line is native: {:?}",
        session_run.measures
    );
}
