//! The bounded collector (issue 14): on a long run the collector merges old events into
//! windows (`collect::compact`); the report must say the same as when every event is kept.
//! `MLPROF_COMPACT_EVENTS` lowers the number of events held before merging starts, so that a
//! run of seconds merges as a run of hours would.

use serde_json::Value;

use crate::cpu::{line, markers};
use crate::fixture::{self, os, within};

const MB: f64 = 1e6;
const SCRIPT: &str = "long_churn.py";

#[test]
fn merged_events_give_the_same_report_as_kept_ones() {
    let m = markers(SCRIPT);
    let script = fixture::script(SCRIPT);
    let py = &fixture::numpy_pythons()[0];
    let v = &py.minor;
    let base = crate::foundation::baseline_peak(py);
    let run = fixture::profile_with_env(
        &[os(&py.exe), os(&script), os("8")],
        &[("MLPROF_COMPACT_EVENTS", "3000")],
    );
    assert!(run.output.status.success(), "{v}: {:?}", run.output);
    let truth: Value = serde_json::from_slice(&run.output.stdout).expect("truth on stdout");
    let n = |k: &str| truth[k].as_f64().expect(k);
    let p = &run.profile;
    assert!(p.event_window_s > 0.0, "{v}: nothing was merged");
    assert!(p.warnings.is_empty(), "{v}: {:?}", p.warnings);

    // The peak is exact (heap counters, not samples), and its holder is the early array,
    // freed long before the end (so folded with what it held at the peak).
    let peak = p.memory.peak_heap_bytes as f64;
    let expected = base + 502.0 * MB + n("leaked_at_peak");
    assert!(
        within(peak, expected, 0.01),
        "{v}: peak {peak} vs {expected}"
    );
    let held = |marker: &str| line(p, SCRIPT, m[marker]).measures.peak_bytes as f64;
    let top = p
        .lines
        .iter()
        .max_by_key(|l| l.measures.peak_bytes)
        .unwrap();
    assert_eq!(top.line, m["early"], "{v}: top holder");
    assert!(
        within(held("early"), 500.0 * MB, 0.10),
        "{v}: {}",
        held("early")
    );
    for after in ["churn", "kept", "leak"] {
        assert!(
            held(after) < 0.01 * 500.0 * MB,
            "{v}: {after} holds {}",
            held(after)
        );
    }

    // Allocated and copied bytes, all merged or not.
    let measures = |marker: &str| line(p, SCRIPT, m[marker]).measures.clone();
    let churn = measures("churn");
    assert!(
        within(churn.alloc_bytes as f64, n("churn_bytes"), 0.10),
        "{v}: churn allocated {} of {}",
        churn.alloc_bytes,
        n("churn_bytes")
    );
    let copy = measures("copy");
    assert!(
        within(copy.copy_bytes as f64, n("copy_bytes"), 0.10),
        "{v}: copied {} of {}",
        copy.copy_bytes,
        n("copy_bytes")
    );

    // The leak is found, and nothing else is.
    assert!(measures("leak").leak.is_some(), "{v}: leak not flagged");
    let flagged: Vec<u32> = p
        .lines
        .iter()
        .filter(|l| l.measures.leak.is_some() && l.line != m["leak"])
        .map(|l| l.line)
        .collect();
    assert!(flagged.is_empty(), "{v}: also flagged {flagged:?}");

    // CPU: the pure-Python line is Python time; samples are counted whole; the footprint of
    // the leak rises.
    let python = measures("python");
    assert!(
        python.cpu_python_s > 2.0 * python.cpu_native_s && python.cpu_python_s > 0.2,
        "{v}: {python:?}"
    );
    // Samples are counted one by one through the merging (counting merged windows would give
    // far fewer): about one per interval of CPU, never more than that allows. On a machine
    // busier than its cores the timer's expiry is noticed only at a tick that finds the thread
    // running, so a sample weighs the CPU since the one before (1.7 intervals on average seen
    // at load 6): down to 40% as many samples.
    let sampled = fixture::sampled_cpu(p);
    let expected_samples = sampled / p.sample_interval_s;
    let n = p.cpu_samples as f64;
    assert!(
        n <= 1.25 * expected_samples && n >= 0.4 * expected_samples,
        "{v}: {} CPU samples for {sampled} s at {} s",
        p.cpu_samples,
        p.sample_interval_s
    );
    let footprint = &line(p, SCRIPT, m["leak"]).footprint_bytes;
    assert!(
        footprint.windows(2).all(|w| w[1] >= w[0]) && footprint.last() > footprint.first(),
        "{v}: leak footprint {footprint:?}"
    );
    let early = &line(p, SCRIPT, m["early"]).footprint_bytes;
    assert_eq!(
        early.last(),
        Some(&0),
        "{v}: early array footprint {early:?}"
    );
}

#[test]
fn short_runs_keep_every_event() {
    let script = fixture::script(SCRIPT);
    let py = &fixture::numpy_pythons()[0];
    let run = fixture::profile(&[os(&py.exe), os(&script), os("1")]);
    assert!(run.output.status.success());
    assert_eq!(run.profile.event_window_s, 0.0);
}
