//! Hints (issue 18): each rule fires on a workload made to trigger it, naming the line (or
//! process), the figure and the saving, and stays quiet on the same workload done right.

use mlprof::model::Hint;
use mlprof::model::Profile;

use crate::cpu::{markers, omp_lib};
use crate::fixture::{self, os, within};

const MIB: f64 = (1u64 << 20) as f64;

fn hints_of(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Profile {
    let run = fixture::profile_with_env(args, env);
    assert!(
        run.output.status.success(),
        "{}",
        String::from_utf8_lossy(&run.output.stderr)
    );
    run.profile
}

fn find<'p>(p: &'p Profile, kind: &str) -> Option<&'p Hint> {
    p.hints.iter().find(|h| h.kind.as_str() == kind)
}

/// One OpenBLAS thread: its pool's spinning after numpy's import (about 0.1 s a thread, native
/// time, truly) joins the line then running, and would be a spin hint on a line that starts
/// no pool work (`inplace`'s loop follows the import at once).
fn mode(py: &fixture::Python, mode: &str) -> Profile {
    hints_of(
        &[os(&py.exe), os(&fixture::script("hints.py")), os(mode)],
        &[("OPENBLAS_NUM_THREADS", "1")],
    )
}

#[test]
fn line_hints_fire_on_their_workloads_and_not_on_the_fixed_ones() {
    let m = markers("hints.py");
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        // (mode that triggers, kind, marker, mode that must not)
        for (on, kind, marker, off) in [
            ("copies", "copies", "copies", "inplace"),
            ("float64", "float64", "float64", "float32"),
            ("objects", "python_objects", "objects", "array"),
            ("keep", "growing", "batch", "bounded"),
        ] {
            let p = mode(py, on);
            let h =
                find(&p, kind).unwrap_or_else(|| panic!("{v}: {on}: no {kind} in {:#?}", p.hints));
            assert_eq!(h.line, Some(m[marker]), "{v}: {on}: {h:?}");
            assert!(
                h.source.as_deref().is_some_and(|s| !s.is_empty()),
                "{v}: {h:?}"
            );
            assert!(!h.evidence.is_empty() && !h.saving.is_empty(), "{v}: {h:?}");
            let saving = h.saving_bytes.unwrap_or(0) as f64;
            match kind {
                // 100 copies of 8 MiB.
                "copies" => assert!(within(saving, 800.0 * MIB, 0.1), "{v}: {h:?}"),
                // Half of the 256 MiB array.
                "float64" => assert!(within(saving, 128.0 * MIB, 0.05), "{v}: {h:?}"),
                // 3 million floats of 24 bytes and their list's 8-byte pointers, against
                // 8 bytes each in an array.
                "python_objects" => {
                    assert!(within(saving, 3e6 * (32.0 - 8.0), 0.15), "{v}: {h:?}")
                }
                // 40 arrays of 4 MiB kept.
                _ => assert!(within(saving, 160.0 * MIB, 0.1), "{v}: {h:?}"),
            }
            let p = mode(py, off);
            assert!(find(&p, kind).is_none(), "{v}: {off}: {:#?}", p.hints);
        }
        // Nothing to suggest for a small program.
        assert!(mode(py, "inplace").hints.is_empty(), "{v}");
    }
}

#[test]
fn more_pool_threads_than_cpus_make_a_hint_and_as_many_do_not() {
    let lib = omp_lib();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let py = &fixture::pythons()[0];
    let script = fixture::script("omp_lines.py");
    let args = [os(&py.exe), os(&script), os(&lib)];
    let over = (4 * cpus).to_string();
    let p = hints_of(&args, &[("OMP_NUM_THREADS", &over)]);
    let h = find(&p, "threads").unwrap_or_else(|| panic!("{:#?}", p.hints));
    assert_eq!(h.pid, Some(p.processes[0].pid));
    assert!(h.evidence.contains(&format!("on {cpus} CPUs")), "{h:?}");
    assert!(h.suggestion.contains("OMP_NUM_THREADS"), "{h:?}");
    assert!(h.saving_s.unwrap() > 0.0);
    let fit = cpus.to_string();
    let p = hints_of(&args, &[("OMP_NUM_THREADS", &fit)]);
    assert!(find(&p, "threads").is_none(), "{:#?}", p.hints);
}

#[test]
fn fork_workers_of_a_large_parent_make_a_hint_and_of_a_small_one_do_not() {
    let m = markers("fork_tree.py");
    let py = &fixture::pythons()[0];
    let script = fixture::script("fork_tree.py");
    let p = hints_of(&[os(&py.exe), os(&script)], &[]);
    let h = find(&p, "fork_inherits").unwrap_or_else(|| panic!("{:#?}", p.hints));
    assert_eq!(h.line, Some(m["parent-alloc"]), "{h:?}");
    assert!(h.evidence.starts_with("4 fork workers"), "{h:?}");
    assert!(
        within(h.saving_bytes.unwrap() as f64, 4.0 * 300.0 * MIB, 0.1),
        "{h:?}"
    );
    let p = hints_of(&[os(&py.exe), os(&script), os("20")], &[]);
    assert!(find(&p, "fork_inherits").is_none(), "{:#?}", p.hints);
}

#[test]
fn no_hints_leaves_them_out_and_the_reports_show_them() {
    let py = &fixture::numpy_pythons()[0];
    let script = fixture::script("hints.py");
    let run = fixture::profile_args(
        &["--no-hints"],
        &[os(&py.exe), os(&script), os("float64")],
        &[],
    );
    assert!(run.profile.hints.is_empty());
    // The terminal report of the same run (and `report` of its profile) lists the hint.
    let out = fixture::mlprof()
        .args(["run", "--"])
        .arg(&py.exe)
        .arg(&script)
        .arg("float64")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    let at = text
        .find("Hints (--no-hints to leave out)")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(text[at..].contains("dtype=np.float32"), "{text}");
    let dir = fixture::tempdir();
    let saved = dir.join("p.json");
    std::fs::write(&saved, serde_json::to_string(&run.profile).unwrap()).unwrap();
    let page = fixture::mlprof()
        .args(["report", "--html"])
        .arg(&saved)
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.contains("<ul id=\"hints\">") && page.contains("float32"),
        "report draws them again"
    );
    let quiet = fixture::mlprof()
        .args(["report", "--no-hints"])
        .arg(&saved)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stdout).contains("Hints"));
}

#[test]
fn an_onnxruntime_arena_kept_after_a_large_input_makes_a_hint_and_no_arena_does_not() {
    let Some(python) = crate::frameworks::framework_python("numpy, onnx, onnxruntime") else {
        return;
    };
    let m = markers("onnx_arena.py");
    let script = fixture::script("onnx_arena.py");
    let p = hints_of(&[os(&python), os(&script), os("on")], &[]);
    let h = find(&p, "onnx_arena").unwrap_or_else(|| panic!("{:#?}", p.hints));
    assert_eq!(h.line, Some(m["run"]), "{h:?}");
    assert!(h.suggestion.contains("kSameAsRequested"), "{h:?}");
    // Two 32 MiB activations of the 8192-row batch, kept by the arena.
    let kept = h.saving_bytes.unwrap() as f64;
    assert!((48.0 * MIB..=160.0 * MIB).contains(&kept), "{h:?}");
    let p = hints_of(&[os(&python), os(&script), os("off")], &[]);
    assert!(find(&p, "onnx_arena").is_none(), "{:#?}", p.hints);
}
