//! A small PyTorch CPU training job (`tests/scripts/torch_job.py`: MLP, Adam, a DataLoader with
//! two worker processes, 3 epochs, torch's own intra-op threads), when torch is installed in
//! `target/torch-venv` (see bench/README.md; it is ~5 GB, so CI has none and this test says it
//! skipped). What the report must not do: leave the pool's time on `<native thread>`, charge
//! idle workers' waiting to `<outside profiled code>`, or count the workers' inherited heap
//! and shared pages again in the tree's peaks.

use crate::fixture::{self, os};

#[test]
fn a_pytorch_job_is_reported_on_its_own_lines() {
    let python = fixture::root().join("target/torch-venv/bin/python");
    let has_torch = std::process::Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        eprintln!("skipped: no torch in target/torch-venv (see bench/README.md)");
        return;
    }
    let script = fixture::script("torch_job.py");
    let run = fixture::profile(&[os(&python), os(&script)]);
    assert!(run.output.status.success());
    let p = &run.profile;
    let time = |l: &mlprof::model::LineStats| {
        l.measures.cpu_python_s + l.measures.cpu_native_s + l.measures.cpu_system_s
    };
    let all: f64 = p.lines.iter().map(time).sum();
    let pseudo = |name: &str| -> f64 { p.lines.iter().filter(|l| l.file == name).map(time).sum() };
    let native = pseudo("<native thread>");
    let outside = pseudo("<outside profiled code>");
    assert!(
        native <= 0.05 * all,
        "<native thread> {native:.2} s of {all:.2} s"
    );
    assert!(
        outside <= 0.15 * all,
        "<outside profiled code> {outside:.2} s of {all:.2} s"
    );
    // The tree's peaks: at most 1.5x its largest process's (workers' inherited heap and
    // shared pages counted once).
    type Peak = fn(&mlprof::model::Process) -> u64;
    let peaks: [(&str, u64, Peak); 2] = [
        ("heap", p.memory.peak_heap_bytes, |q| q.peak_heap_bytes),
        ("RSS", p.memory.peak_rss_bytes, |q| q.peak_rss_bytes),
    ];
    for (what, tree, of) in peaks {
        let largest = p.processes.iter().map(of).max().unwrap_or(0);
        assert!(
            tree as f64 <= 1.5 * largest as f64,
            "tree {what} peak {tree} vs the largest process's {largest}"
        );
    }
    let m = crate::cpu::markers("torch_job.py");
    let fwd = time(crate::cpu::line(p, "torch_job.py", m["forward"]));
    let bwd = time(crate::cpu::line(p, "torch_job.py", m["backward"]));
    assert!(
        fwd > 0.0 && bwd > 0.0,
        "forward {fwd:.2} s, backward {bwd:.2} s"
    );
}
