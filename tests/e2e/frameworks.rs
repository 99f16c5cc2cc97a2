//! Real ML frameworks' thread pools (issue 15): scikit-learn's OpenMP estimators and
//! onnxruntime's intra-op pool, run with `target/bench-venv`'s Python when it has them (see
//! bench/README.md: `python3 bench/run.py --install`); each test says it skipped otherwise.
//! What the report must do: charge the pool threads' CPU to the line that called the library,
//! leave (almost) nothing on `<native thread>`, and name the library's functions.

use mlprof::model::{LineStats, Profile};

use crate::cpu::{line, markers};
use crate::fixture::{self, os};
use crate::starvation::printed;

/// The benchmark venv's Python, if it can import `modules`.
pub fn framework_python(modules: &str) -> Option<std::path::PathBuf> {
    let python = fixture::root().join("target/bench-venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::fixture::skipped(&format!(
            "skipped: {modules} not importable by target/bench-venv (bench/run.py --install)"
        ));
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

/// `python script args` exits and prints exactly as without mlprof in `runs` default runs
/// under it (the JIT GEMM kernels of JAX and TensorFlow keep live data below their stack
/// pointer: a SIGPROF taken on that stack crashed them every time). Returns the last run.
fn never_harmed(
    python: &std::path::Path,
    script: &str,
    args: &[&str],
    runs: usize,
) -> fixture::Run {
    let script = fixture::script(script);
    let mut argv = vec![os(python), os(&script)];
    argv.extend(args.iter().map(os));
    let plain = std::process::Command::new(python)
        .args(&argv[1..])
        .output()
        .expect("run without mlprof");
    assert!(plain.status.success(), "{script:?} fails without mlprof");
    let mut last = None;
    for i in 0..runs {
        let (output, _, text) =
            fixture::run_mlprof(&[], &argv, &[], std::time::Duration::from_secs(600));
        assert_eq!(
            (output.status.code(), &output.stdout),
            (plain.status.code(), &plain.stdout),
            "run {i} of {runs} under mlprof differs from the run without it; stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        last = text.map(|t| fixture::Run {
            profile: fixture::check_profile(&t),
            output,
        });
    }
    last.expect("a profile")
}

/// `lines` (markers of `script`) hold `truth` seconds of CPU within 25% (the sampling error of
/// a few hundred samples is under 10%; the rest is start-up work of the pool threads that the
/// first step still charges elsewhere).
fn lines_hold(p: &Profile, script: &str, lines: &[&str], truth: f64) {
    let m = markers(script);
    let path = fixture::script(script);
    let held: f64 = p
        .lines
        .iter()
        .filter(|l| l.file == path.to_str().unwrap())
        .filter(|l| lines.iter().any(|k| m[*k] == l.line))
        .map(cpu)
        .sum();
    eprintln!("{script}: {lines:?} hold {held:.2} s of CPU; the kernel counted {truth:.2} s");
    assert!(
        fixture::within(held, truth, 0.25),
        "{script}: {lines:?} hold {held:.2} s; the loop used {truth:.2} s"
    );
}

#[test]
fn jax_jit_training_never_crashes_and_its_loop_lines_hold_its_cpu() {
    let Some(python) = framework_python("jax") else {
        return;
    };
    let run = never_harmed(&python, "jax_job.py", &["300"], 20);
    let truth = printed(&run.output.stderr, "loop cpu");
    lines_hold(
        &run.profile,
        "jax_job.py",
        &["loop", "step", "update", "ready"],
        truth,
    );
}

#[test]
fn tensorflow_keras_fit_never_crashes_and_its_line_holds_its_cpu() {
    let Some(python) = framework_python("tensorflow") else {
        return;
    };
    let run = never_harmed(&python, "tf_job.py", &["2"], 20);
    let truth = printed(&run.output.stderr, "fit cpu");
    lines_hold(&run.profile, "tf_job.py", &["fit"], truth);
}

#[test]
fn polars_bundled_allocator_memory_is_counted_on_its_join_and_sort_lines() {
    let Some(python) = framework_python("polars") else {
        return;
    };
    let script = fixture::script("polars_job.py");
    let run = fixture::profile(&[os(&python), os(&script)]);
    assert!(run.output.status.success());
    let p = &run.profile;
    let (counted, rss) = (
        p.memory.peak_counted_bytes as f64,
        p.memory.peak_rss_bytes as f64,
    );
    eprintln!(
        "polars: counted peak {:.0} MiB, RSS peak {:.0} MiB",
        counted / 1048576.0,
        rss / 1048576.0
    );
    assert!(
        fixture::within(counted, rss, 0.15),
        "counted peak {counted} against RSS peak {rss}: {:?}",
        p.memory
    );
    let m = markers("polars_job.py");
    let frame = 240e6; // 10M rows of three 8-byte columns
    let join = line(p, "polars_job.py", m["join"])
        .measures
        .mapped_peak_bytes as f64;
    let sort = line(p, "polars_job.py", m["sort"])
        .measures
        .mapped_peak_bytes as f64;
    assert!(join >= 0.9 * frame, "the join line holds its frame: {join}");
    // The mapped peak's instant: the first timeline point at the highest mapped bytes (from
    // launch, which is the process's start within a tick; the mapped total may stay level at
    // the join's high for a while, and the peak is reached at its start). Only the sort runs
    // after it began, so what the process mapped on top of its last point before the sort is
    // the sort's: the sort line holds at least that growth at the peak (less a tenth of a frame
    // for the points' alignment), whether jemalloc purged the join's extents meanwhile or not.
    let began = printed(&run.output.stderr, "sort began");
    let timeline = &p.memory.timeline;
    let high = timeline.iter().map(|s| s.mapped_bytes).max().unwrap_or(0);
    let peak = timeline
        .iter()
        .find(|s| s.mapped_bytes == high)
        .map_or(0.0, |s| s.t_s);
    let before = timeline
        .iter()
        .rev()
        .find(|s| s.t_s <= began)
        .map_or(0, |s| s.mapped_bytes);
    if peak > began {
        let growth = high.saturating_sub(before) as f64;
        assert!(
            sort >= growth - 0.1 * frame,
            "the mapped peak {peak:.2} s came after the sort began ({began:.2} s), {growth} bytes \
             above the last point before it; the sort line holds {sort} there"
        );
    } else {
        assert!(
            sort < 0.1 * frame,
            "the mapped peak {peak:.2} s came before the sort began ({began:.2} s), yet the \
             sort line holds {sort} there"
        );
    }
}
