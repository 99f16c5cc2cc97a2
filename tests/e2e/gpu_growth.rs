//! GPU memory that grows, through the fake CUDA runtime (`tests/fake-cuda`, built by
//! `gpu_calls::framework`): `mlprof sweep` fits each line's device memory against the
//! parameter from the exact figures of the calls.

use mlprof::model::sweep::Sweep;

use crate::cpu::markers;
use crate::fixture;

const MIB: u64 = 1 << 20;

#[test]
fn sweep_fits_gpu_memory_exponents_of_lines_growing_linearly_and_quadratically() {
    let m = markers("gpu_growth.py");
    let py = fixture::pythons().last().unwrap();
    let lib = crate::gpu_calls::framework();
    let dir = fixture::tempdir();
    let out = fixture::mlprof()
        .args(["sweep", "--param", "N=2,4,8", "--project", "N=16", "--json"])
        .arg("--runs-dir")
        .arg(dir.join("runs"))
        .arg("--")
        .arg(&py.exe)
        .arg(fixture::script("gpu_growth.py"))
        .arg(lib)
        .arg("{N}")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Sweep = serde_json::from_slice(&out.stdout).expect("a sweep document");
    let line = |name: &str| {
        s.lines
            .iter()
            .find(|l| l.line == m[name])
            .unwrap_or_else(|| panic!("@{name} in {:?}", s.lines))
    };
    // Exact figures (every allocation is recorded): the exponents are exact too.
    let exact = |k: Option<f64>, want: f64| k.is_some_and(|k| (k - want).abs() < 1e-9);
    let (linear, square, scratch) = (line("gpu_linear"), line("gpu_square"), line("gpu_scratch"));
    assert!(exact(linear.gpu_peak_exponent, 1.0), "{linear:?}");
    assert!(exact(linear.gpu_reserved_exponent, 1.0), "{linear:?}");
    assert!(exact(square.gpu_peak_exponent, 2.0), "{square:?}");
    assert!(exact(square.gpu_reserved_exponent, 2.0), "{square:?}");
    assert_eq!(
        square.gpu_peak_bytes,
        [Some(4 * MIB), Some(16 * MIB), Some(64 * MIB)]
    );
    assert_eq!(square.projected_gpu_peak_bytes, Some(256 * MIB));
    assert!((square.gpu_peak_r2.unwrap() - 1.0).abs() < 1e-9);
    // Reserved and given back before the peak: its reserve grows, nothing is held to fit.
    assert!(exact(scratch.gpu_reserved_exponent, 1.0), "{scratch:?}");
    assert_eq!(scratch.gpu_peak_exponent, None, "{scratch:?}");
    assert_eq!(scratch.gpu_peak_bytes, [Some(0), Some(0), Some(0)]);
    // The runs' GPU peaks: N + N² MiB, and the square line first (the most held).
    let peaks: Vec<u64> = s.runs.iter().map(|r| r.gpu_peak_bytes / MIB).collect();
    assert_eq!(peaks, [6, 20, 72]);
    assert_eq!(s.lines[0].line, m["gpu_square"]);
    assert!(s.gpu_peak.exponent.is_some());

    // The terminal report of the same sweep.
    let text = mlprof::render::sweep::text(&s, None);
    assert!(text.contains("GPU memory by line"), "{text}");
    assert!(
        text.contains("holds GPU memory growing as N^2.00 (R² 1.00); at N=16 it would hold 256.0 MiB on the GPU"),
        "{text}"
    );
    // And its page: a plot of each line's GPU memory, with its law.
    let page = mlprof::render::sweep::html(&s).unwrap();
    let doc = scraper::Html::parse_document(&page);
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    assert!(page.contains("GPU held ∝ N^2.00"), "{page}");
    assert!(page.contains("<th>GPU peak</th>"), "{page}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_line_pinning_host_memory_again_and_again_gets_the_pinned_growth_hint_and_reuse_does_not() {
    // @pinned_grow pins 4 MiB twenty times and keeps every block: 80 MiB held at the end;
    // @pinned_reuse pins as much as often, giving each block back.
    let py = fixture::pythons().last().unwrap();
    let lib = crate::gpu_calls::framework().to_str().unwrap().to_string();
    let m = markers("gpu_calls.py");
    let run = fixture::profile_script(py, "gpu_calls.py", &[&lib], &[("PINNED_STEPS", "20")]);
    let p = &run.profile;
    let calls = |name: &str| {
        let l = p
            .lines
            .iter()
            .find(|l| l.file.ends_with("gpu_calls.py") && l.line == m[name])
            .unwrap_or_else(|| panic!("@{name}"));
        let g = &l.measures.gpu_calls;
        (
            g.gpu_pinned_bytes,
            g.gpu_pinned_calls,
            g.gpu_pinned_end_bytes,
        )
    };
    assert_eq!(calls("pinned_grow"), (80 * MIB, 20, 80 * MIB));
    assert_eq!(calls("pinned_reuse"), (80 * MIB, 20, 0));
    let hints: Vec<(&str, u32)> = p
        .hints
        .iter()
        .filter(|h| h.kind.as_str() == "pinned_growth")
        .map(|h| (h.kind.as_str(), h.line.unwrap_or(0)))
        .collect();
    assert_eq!(
        hints,
        [("pinned_growth", m["pinned_grow"])],
        "{:?}",
        p.hints
    );
    let hint = p.hints.iter().find(|h| h.kind.as_str() == "pinned_growth");
    assert_eq!(hint.and_then(|h| h.saving_bytes), Some(76 * MIB));
    // The process's pinned peak: the script's own 8 MiB at most, then the 80 MiB kept and one
    // block being reused.
    let process = p
        .processes
        .iter()
        .find_map(|q| q.gpu_calls.as_ref())
        .unwrap();
    assert_eq!(process.pinned_peak_bytes, (6 + 80 + 4) * MIB);
}
