//! Memory per line (issue 4): bytes allocated, held at the peak, Python vs native, copied, and
//! likely leaks, against scripts whose truth is known by construction, on every Python with
//! numpy.

use mlprof::model::Profile;

use crate::cpu::{line, markers};
use crate::fixture::{self, within};

const MB: f64 = 1e6;

fn run(py: &fixture::Python, scenario: &str) -> Profile {
    fixture::profile_script(py, "memory_lines.py", &[scenario], &[]).profile
}

#[test]
fn peak_heap_is_exact_and_the_kept_array_is_the_top_holder() {
    let m = markers("memory_lines.py");
    for py in fixture::numpy_pythons() {
        let v = &py.minor;
        let p = run(py, "peak");
        // Baseline: the same interpreter with numpy imported and nothing kept.
        let base = crate::foundation::baseline_peak(py);
        let truth = base + 500.0 * MB;
        let got = p.memory.peak_heap_bytes as f64;
        assert!(within(got, truth, 0.01), "{v}: peak {got} vs truth {truth}");
        let kept = line(&p, "memory_lines.py", m["peak-holder"]);
        let top = p
            .lines
            .iter()
            .max_by_key(|l| l.measures.peak_bytes)
            .unwrap();
        assert_eq!(
            (top.file.as_str(), top.line),
            (kept.file.as_str(), kept.line),
            "{v}: top holder"
        );
        assert!(
            within(kept.measures.peak_bytes as f64, 400.0 * MB, 0.10),
            "{v}: {:?}",
            kept.measures
        );
    }
}

#[test]
fn a_large_python_object_is_held_at_its_line_at_the_peak() {
    // Python's allocator sends a big block on to malloc: the block must be sampled before the
    // heap's peak mark it causes, or it is not held at the peak.
    let m = markers("memory_lines.py");
    for py in fixture::numpy_pythons() {
        let v = &py.minor;
        let p = run(py, "pyobject");
        let kept = line(&p, "memory_lines.py", m["pyobject"]);
        assert!(
            within(kept.measures.peak_bytes as f64, 300.0 * MB, 0.05),
            "{v}: {:?}",
            kept.measures
        );
        assert!(kept.measures.alloc_python_bytes > 0, "{v}: Python bytes");
    }
}

#[test]
fn churning_line_allocates_a_gigabyte_and_holds_nothing_at_the_peak() {
    let m = markers("memory_lines.py");
    for py in fixture::numpy_pythons() {
        let v = &py.minor;
        let p = run(py, "churn");
        let churn = line(&p, "memory_lines.py", m["churn"]);
        assert!(
            within(churn.measures.alloc_bytes as f64, 1000.0 * MB, 0.10),
            "{v}: {:?}",
            churn.measures
        );
        assert!(
            (churn.measures.peak_bytes as f64) < 5.0 * MB,
            "{v}: {:?}",
            churn.measures
        );
        let kept = line(&p, "memory_lines.py", m["kept-after-churn"]);
        assert!(
            within(kept.measures.peak_bytes as f64, 400.0 * MB, 0.10),
            "{v}: {:?}",
            kept.measures
        );
    }
}

#[test]
fn python_object_bytes_are_told_from_native_bytes() {
    let m = markers("memory_lines.py");
    for py in fixture::numpy_pythons() {
        let v = &py.minor;
        let p = run(py, "python");
        let floats = line(&p, "memory_lines.py", m["floats"]);
        // sys.getsizeof(1.5) == 24 on every 64-bit CPython. About 370 samples at the default
        // 128 KiB: a spread of about 5% (0.90-1.08 of the truth over 12 runs); 20% is four of
        // it (15% failed once in a CI run, at 1.158).
        let truth = 2_000_000.0 * 24.0;
        assert!(
            within(floats.measures.alloc_python_bytes as f64, truth, 0.20),
            "{v}: floats line {:?}",
            floats.measures
        );
        // The exact heap sees pymalloc's arenas: 2 M floats (48 MB) and the 16 MB list are in it,
        // beside the 80 MB numpy array.
        let base = crate::foundation::baseline_peak(py);
        let heap = p.memory.peak_heap_bytes as f64;
        assert!(
            heap >= base + 0.95 * 144.0 * MB,
            "{v}: heap {heap} misses Python objects (base {base})"
        );
        let numpy = line(&p, "memory_lines.py", m["numpy"]);
        assert!(
            within(numpy.measures.alloc_bytes as f64, 80.0 * MB, 0.10),
            "{v}: {:?}",
            numpy.measures
        );
        assert!(
            (numpy.measures.alloc_python_bytes as f64) < 0.01 * 80.0 * MB,
            "{v}: {:?}",
            numpy.measures
        );
    }
}

#[test]
fn the_leaking_line_is_flagged_and_nothing_else() {
    let m = markers("memory_lines.py");
    for py in fixture::numpy_pythons() {
        let v = &py.minor;
        let p = run(py, "leak");
        let leak = line(&p, "memory_lines.py", m["leak"]);
        assert!(
            leak.measures.leak.is_some(),
            "{v}: leaking line not flagged: {:?}",
            leak.measures
        );
        let flagged: Vec<String> = p
            .lines
            .iter()
            .filter(|l| l.measures.leak.is_some() && l.line != leak.line)
            .map(|l| format!("{}:{}", l.file, l.line))
            .collect();
        assert!(flagged.is_empty(), "{v}: also flagged: {flagged:?}");
        let temp = line(&p, "memory_lines.py", m["temporary"]);
        assert!(
            within(temp.measures.alloc_bytes as f64, 150.0 * MB, 0.15),
            "{v}: {:?}",
            temp.measures
        );
    }
}

#[test]
fn copy_volume_of_a_copying_line_is_counted() {
    let m = markers("memory_lines.py");
    for py in fixture::numpy_pythons() {
        let p = run(py, "copy");
        let copy = line(&p, "memory_lines.py", m["copy"]);
        assert!(
            within(copy.measures.copy_bytes as f64, 4000.0 * MB, 0.10),
            "{}: {:?}",
            py.minor,
            copy.measures
        );
    }
}

/// Each worker's heap growth over what it inherited, with the tasks it ran.
fn pool_growth(py: &fixture::Python, size_mb: &str, method: &str) -> (Vec<(f64, u64)>, Profile) {
    let v = &py.minor;
    let run = fixture::profile_script(py, "pool.py", &[size_mb, method], &[]);
    let tasks: std::collections::HashMap<String, u64> =
        serde_json::from_slice(run.output.stdout.trim_ascii()).expect("task counts");
    let growth = tasks
        .iter()
        .map(|(pid, &count)| {
            let worker = run
                .profile
                .processes
                .iter()
                .find(|p| p.pid.to_string() == *pid);
            let worker = worker.unwrap_or_else(|| panic!("{v}: worker {pid} missing"));
            let forked = method == "fork";
            assert_eq!(worker.forked, forked, "{v}: {worker:?}");
            assert_eq!(
                worker.inherited_heap_bytes > 1_000_000,
                forked,
                "{v} {method}: inherited heap: {worker:?}"
            );
            assert!(worker.python.is_some(), "{v}: {worker:?}");
            (
                worker.peak_heap_bytes as f64 - worker.inherited_heap_bytes as f64,
                count,
            )
        })
        .collect();
    (growth, run.profile)
}

#[test]
fn fork_and_spawn_pools_of_four_workers_have_each_workers_peak_right() {
    let m = markers("pool.py");
    for py in fixture::numpy_pythons() {
        for method in ["fork", "spawn"] {
            pool_peaks_are_right(py, method, m["worker-alloc"]);
        }
    }
}

fn pool_peaks_are_right(py: &fixture::Python, method: &str, alloc_line: u32) {
    let v = format!("{} {method}", py.minor);
    let (base, _) = pool_growth(py, "0", method);
    let base_per_worker = base.iter().map(|&(g, _)| g).fold(f64::MAX, f64::min);

    let (growth, profile) = pool_growth(py, "100", method);
    assert_eq!(
        growth.iter().map(|&(_, n)| n).sum::<u64>(),
        4,
        "{v}: four tasks"
    );
    for (own, count) in growth {
        // Its arrays on top of what the worker holds then, which is at most the base run's
        // peak: where start-up's own peak is the higher (a spawn worker of 3.14 peaks at
        // 18 MB while it starts, then holds 15 MB), the arrays' peak has less beneath it.
        let arrays = count as f64 * 100.0 * MB;
        let truth = base_per_worker + arrays;
        assert!(
            own >= arrays && own <= 1.02 * truth,
            "{v}: a worker grew {own}, truth {arrays} to {truth}"
        );
    }
    let line = line(&profile, "pool.py", alloc_line);
    assert!(
        within(line.measures.alloc_bytes as f64, 400.0 * MB, 0.10),
        "{v}: {:?}",
        line.measures
    );
}

#[test]
fn the_holders_at_the_peak_belong_to_the_instant_the_header_names() {
    let py = &fixture::pythons()[0];
    let script = fixture::script("twin_peaks.py");
    let run = fixture::profile(&[fixture::os(&py.exe), fixture::os(&script)]);
    assert!(run.output.status.success());
    let p = &run.profile;
    let second = crate::starvation::printed(&run.output.stderr, "second at");
    let m = crate::cpu::markers("twin_peaks.py");
    let top = p
        .lines
        .iter()
        .max_by_key(|l| l.measures.peak_bytes)
        .unwrap();
    assert_eq!(top.line, m["first"], "holders of the first peak: {top:?}");
    assert!(
        p.memory.peak_at_s < second,
        "the header names the holders' instant ({:.2} s), before the second peak ({second:.2} s)",
        p.memory.peak_at_s
    );
}
