//! Regions (`mlprof.mark`) cut the CUDA calls too: through the fake CUDA runtime
//! (`tests/fake-cuda`, built by `gpu_calls::framework`), two regions making different
//! allocations, copies and launches through the same lines each get exactly their own, in the
//! profile's region summaries and on each region's own page.

use mlprof::model::profile::{GpuLineCalls, Profile};

use crate::cpu::markers;
use crate::fixture::{self, os};

const MIB: u64 = 1 << 20;
const SCRIPT: &str = "gpu_regions.py";

/// The profile a report page embeds.
pub(crate) fn embedded(page: &str) -> Profile {
    let doc = scraper::Html::parse_document(page);
    let json = scraper::Selector::parse("script[type='application/json']").unwrap();
    let text = doc
        .select(&json)
        .next()
        .expect("the embedded profile")
        .inner_html();
    serde_json::from_str(&text).expect("the embedded profile reads back")
}

/// The `gpu_*` figures of the line marked `@name` in `p` (zeros when it has none).
fn at(p: &Profile, name: &str) -> GpuLineCalls {
    let line = markers(SCRIPT)[name];
    p.lines
        .iter()
        .find(|l| l.file.ends_with(SCRIPT) && l.line == line)
        .map(|l| l.measures.gpu_calls)
        .unwrap_or_default()
}

#[test]
fn each_region_gets_exactly_its_own_gpu_memory_copies_and_launches() {
    let py = fixture::pythons().last().unwrap();
    let lib = crate::gpu_calls::framework();
    let dir = fixture::tempdir();
    let pages = dir.join("pages");
    let run = fixture::profile_args(
        &["--regions-html", pages.to_str().unwrap()],
        &[os(&py.exe), os(&fixture::script(SCRIPT)), os(lib)],
        &[
            (
                "PYTHONPATH",
                fixture::root().join("python").to_str().unwrap(),
            ),
            ("MLPROF_GPU_LAUNCH_SAMPLE", "1"),
        ],
    );
    assert!(run.output.status.success());
    let p = &run.profile;

    // The whole run: every call of each line.
    let whole = (at(p, "alloc"), at(p, "h2d"), at(p, "launch"));
    assert_eq!(whole.0.gpu_reserved_bytes, (16 + 64 + 32) * MIB);
    assert_eq!(whole.1.gpu_h2d_bytes, (7 + 3 + 5) * MIB);
    assert_eq!(whole.2.gpu_launches, 30);

    // The regions' summaries: (reserved, held at its GPU peak, given back, H→D, D→H, launches).
    let figures = |g: &GpuLineCalls| {
        (
            g.gpu_reserved_bytes / MIB,
            g.gpu_peak_bytes / MIB,
            g.gpu_freed_bytes / MIB,
            g.gpu_h2d_bytes / MIB,
            g.gpu_d2h_bytes / MIB,
            g.gpu_launches,
        )
    };
    let region = |name: &str| {
        let r = p.regions.iter().find(|r| r.name == name);
        r.unwrap_or_else(|| panic!("region {name}: {:?}", p.regions))
    };
    assert_eq!(figures(&region("load").gpu_calls), (64, 64, 0, 3, 0, 10));
    assert_eq!(figures(&region("step").gpu_calls), (32, 32, 32, 5, 2, 20));

    // Each region's page: its lines carry only its own calls.
    let page = |name: &str| {
        let file = pages.join(format!("{name}.html"));
        embedded(&std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}")))
    };
    let (load, step) = (page("load"), page("step"));
    assert_eq!(at(&load, "alloc").gpu_reserved_bytes, 64 * MIB);
    assert_eq!(at(&load, "h2d").gpu_h2d_bytes, 3 * MIB);
    assert_eq!(at(&load, "d2h"), GpuLineCalls::default());
    assert_eq!(at(&step, "alloc").gpu_freed_bytes, 32 * MIB);
    assert_eq!(at(&step, "h2d").gpu_h2d_bytes, 5 * MIB);
    assert_eq!(at(&step, "d2h").gpu_d2h_bytes, 2 * MIB);
    assert_eq!(at(&step, "launch").gpu_launches, 20);
    // Its device timeline is its own: 32 MiB taken and given back.
    let device = step
        .processes
        .iter()
        .find_map(|q| q.gpu_calls.as_ref())
        .unwrap();
    let held: Vec<u64> = device.devices[0]
        .timeline
        .iter()
        .map(|s| s.bytes / MIB)
        .collect();
    assert_eq!(held, [32, 0]);
    // The text report names each region's calls under its row.
    let text = mlprof::render::text::render(p);
    assert!(
        text.contains("GPU: reserved 32.0 MiB in 1 call, 32.0 MiB held at the GPU peak, 32.0 MiB given back; copied H→D 5.0 MiB, D→H 2.0 MiB"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
