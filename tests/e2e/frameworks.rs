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
    let held = |marker: &str| line(p, "polars_job.py", m[marker]).measures.peak_bytes as f64;
    let mapped = |marker: &str| {
        line(p, "polars_job.py", m[marker])
            .measures
            .mapped_peak_bytes as f64
    };
    // Lines are taken at the counted peak, which comes while `joined` is alive (the join's end
    // or the sort). jemalloc reuses extents it mapped for one line for the next (and a mapping
    // made by the pool as the join begins may join the line before), so the frame's bytes
    // are on polars' lines, most on the join's; what it purges of the join's extents while the
    // sort runs stays the join's (it moved to the sort, and the join held 40-60 MiB, before).
    let (join, sort) = (held("join"), held("sort"));
    let polars = join + sort + mapped("right");
    assert!(polars >= 0.9 * frame, "polars' lines hold {polars}");
    assert!(join >= 0.5 * frame, "the join line holds {join}");
    assert!(
        join + sort <= 1.05 * counted,
        "{join} + {sort} held of {counted}"
    );
    // The holders list and the hints see the counted peak: the numpy inputs of `left` and
    // `right` (a sixth of it each) are not its top holders, and no float32 hint calls them a
    // large share of the peak (46% before: a share of the heap peak).
    let top = p
        .lines
        .iter()
        .max_by_key(|l| l.measures.peak_bytes)
        .map_or(0, |l| l.line);
    assert!(
        [m["join"], m["sort"], m["right"]].contains(&top) && top != m["left"],
        "the top holder is line {top}"
    );
    let text = fixture::read_with("report", &save(p), &["--width", "100"]);
    for h in p
        .hints
        .iter()
        .filter(|h| h.line == Some(m["left"]) || h.line == Some(m["right"]))
    {
        // "holds X at the peak (N% of it)": each input is a sixth of the counted peak.
        let share: f64 = h
            .evidence
            .split_once(" (")
            .and_then(|(_, rest)| rest.split_once('%'))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or(100.0);
        assert!(share <= 30.0, "{}\n{text}", h.evidence);
    }
    // The "held" cells of the join and sort rows (where "allocated" is 0 B: polars' memory
    // is mapped) show what they hold.
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("line "))
        .unwrap_or("");
    let held_end = header.find(" held").map_or(0, |i| i + " held".len());
    let held_cell = |marker: &str| {
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{} ", m[marker])))
            .unwrap_or("");
        let words: Vec<&str> = row
            .get(..held_end)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        words[words.len().saturating_sub(2)..].join(" ")
    };
    let began = printed(&run.output.stderr, "sort began");
    let shown: &[&str] = match p.memory.held_at_s() > began && sort > 0.0 {
        true => &["join", "sort"],
        false => &["join"],
    };
    for &marker in shown {
        let cell = held_cell(marker);
        assert!(
            cell.ends_with("MiB") || cell.ends_with("GiB"),
            "{marker} holds {cell:?}:\n{text}"
        );
    }
}

/// `p` written to a file of its own (for `mlprof report`).
fn save(p: &Profile) -> std::path::PathBuf {
    let path = fixture::tempdir().join("profile.json");
    std::fs::write(&path, serde_json::to_string(p).unwrap()).unwrap();
    path
}
