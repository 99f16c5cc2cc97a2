//! Tensors on the GPU per region (issue 35): regions the program marks (`mlprof.mark`) and
//! the tests of `pytest --mlprof` get the tensors their process held at their begin, the most
//! they held above it, and the lines that made them, from the allocator's trace, against a
//! stand-in for PyTorch's allocator (`tests/fake-torch`) whose figures are known by
//! construction.

use mlprof::model::profile::Profile;
use mlprof::model::{Region, RegionLine};

use crate::cpu::markers;
use crate::fixture::{self, os};
use crate::gpu_regions::embedded;

const SCRIPT: &str = "gpu_tensor_regions.py";
const MIB: u64 = 1 << 20;

/// `PYTHONPATH` with the stand-in for PyTorch and mlprof's Python package.
fn python_path() -> String {
    let root = fixture::root();
    format!(
        "{}:{}",
        root.join("tests/fake-torch").display(),
        root.join("python").display()
    )
}

fn region<'p>(p: &'p Profile, name: &str) -> &'p Region {
    let r = p.regions.iter().find(|r| r.name == name);
    r.unwrap_or_else(|| panic!("region {name}: {:?}", p.regions))
}

/// A region's tensors: (MiB at its begin, MiB above it at its highest, [(line, MiB)]).
fn tensors(r: &Region) -> (u64, u64, Vec<(u32, u64)>) {
    let lines = |l: &[RegionLine]| l.iter().map(|l| (l.line, l.bytes / MIB)).collect();
    (
        r.gpu_tensor_start_bytes / MIB,
        r.gpu_tensor_peak_bytes / MIB,
        lines(&r.gpu_tensors_at_peak),
    )
}

#[test]
fn each_marked_region_gets_the_tensors_it_made_above_what_it_started_with() {
    let path = python_path();
    let m = markers(SCRIPT);
    let pythons = fixture::pythons();
    for py in [pythons.first().unwrap(), pythons.last().unwrap()] {
        let v = &py.minor;
        let dir = fixture::tempdir();
        let pages = dir.join("pages");
        let run = fixture::profile_args(
            &["--regions-html", pages.to_str().unwrap()],
            &[os(&py.exe), os(&fixture::script(SCRIPT))],
            &[("PYTHONPATH", path.as_str())],
        );
        assert!(run.output.status.success(), "{v}: {:?}", run.output);
        let p = &run.profile;
        // Exact, by construction (see the script).
        assert_eq!(
            tensors(region(p, "load")),
            (8, 20, vec![(m["weights"], 16), (m["scratch"], 4)]),
            "{v}"
        );
        assert_eq!(
            tensors(region(p, "step")),
            (24, 34, vec![(m["act"], 32), (m["kept"], 2)]),
            "{v}"
        );
        assert_eq!(tensors(region(p, "idle")), (18, 0, vec![]), "{v}");
        // The region's page: its lines hold only what it made; the rest, held from before
        // (@weights, and @model, freed after the peak), has no line in it.
        let file = pages.join("step.html");
        let step = embedded(&std::fs::read_to_string(&file).unwrap());
        let t = step.processes[0]
            .gpu_tensors
            .as_ref()
            .expect("the trace, cut");
        let d = &t.devices[0];
        assert_eq!(
            (d.peak_allocated_bytes, d.before_trace_bytes),
            (58 * MIB, 24 * MIB),
            "{v}: {t:?}"
        );
        let held = |name: &str| {
            step.lines
                .iter()
                .filter(|l| l.file.ends_with(SCRIPT) && l.line == m[name])
                .map(|l| l.measures.gpu_tensor_peak_bytes)
                .sum::<u64>()
        };
        assert_eq!((held("act"), held("kept")), (32 * MIB, 2 * MIB), "{v}");
        assert_eq!((held("model"), held("weights")), (0, 0), "{v}");
        assert!(t.cut_to_region, "{v}");
        let text = mlprof::render::text::render(&step);
        assert!(
            text.contains("24.0 MiB allocated before the region began"),
            "{v}: {text}"
        );
        // The run's report says it under the region's row; its page draws a column from it.
        let text = mlprof::render::text::render(p);
        let said = "GPU tensors: 34.0 MiB at its highest above the 24.0 MiB held at its start";
        assert!(text.contains(said), "{v}: {text}");
        let page = mlprof::render::html::render(p).unwrap();
        assert!(page.contains(r#"["GPU tensors", (r) => r.gpu_tensor_peak_bytes"#));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn each_pytest_test_gets_its_own_tensors_in_the_session_profile() {
    // A Python with pytest (the test venvs).
    let pythons = fixture::numpy_pythons();
    let py = pythons.last().unwrap();
    let dir = fixture::tempdir();
    std::fs::copy(
        fixture::script("pytest_gpu_tensors.py"),
        dir.join("test_gpu.py"),
    )
    .unwrap();
    let out = crate::pytest_plugin::pytest_with_path(
        &py.exe,
        &dir,
        &["--mlprof", "--mlprof-output", "session.json", "test_gpu.py"],
        &python_path(),
    );
    assert!(out.status.success(), "{out:?}");
    let p = fixture::check_profile(&std::fs::read_to_string(dir.join("session.json")).unwrap());
    let m = markers("pytest_gpu_tensors.py");
    // The module's fixture (8 MiB) was made outside both tests: each starts with it.
    assert_eq!(
        tensors(region(&p, "test_gpu.py::test_big")),
        (8, 24, vec![(m["big"], 24)])
    );
    assert_eq!(
        tensors(region(&p, "test_gpu.py::test_small")),
        (8, 1, vec![(m["small"], 1)])
    );
    let _ = std::fs::remove_dir_all(&dir);
}
