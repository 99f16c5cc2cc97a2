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
    let text = mlprof::render::sweep::text(&s);
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
