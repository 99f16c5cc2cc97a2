//! Deterministic guards on overhead: counts, never times (the machines are noisy). A change
//! like reading every frame of every allocation sample through a system call (which once made
//! scikit-learn 3x slower) fails here.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::fixture::{self, os, pythons};

/// `process_vm_readv` calls the profiled program made, counted by `strace -c`.
fn vm_reads(py: &Path, iterations: u32) -> u64 {
    let dir = fixture::tempdir();
    let counts = dir.join("strace.txt");
    let out = fixture::mlprof()
        .args(["run", "--rate", "0", "--memory-sample-bytes", "16KiB", "-o"])
        .arg(dir.join("profile.json"))
        .args([
            os("--"),
            os("strace"),
            os("-f"),
            os("-qq"),
            os("-c"),
            os("-o"),
        ])
        .arg(&counts)
        .args(["-e", "trace=process_vm_readv"])
        .arg(py)
        .arg(fixture::script("deep_alloc.py"))
        .arg(iterations.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run mlprof");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&counts).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    text.lines()
        .find(|l| l.trim_end().ends_with("process_vm_readv"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn allocation_samples_read_their_stack_without_system_calls() {
    if !Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: strace is not installed (.ci/run installs it)");
        return;
    }
    for py in pythons() {
        // 8x the iterations: about 10,000 more allocation samples, each 60 frames deep. Read
        // through the kernel, every one of them would cost hundreds of calls; the stack of a
        // thread at an allocation point is read with plain loads, so only the fixed start-up
        // and shutdown reads remain.
        let few = vm_reads(&py.exe, 5_000);
        let many = vm_reads(&py.exe, 40_000);
        assert!(
            many < few + 2_000,
            "{}: process_vm_readv calls grew with allocation samples: {few} -> {many}",
            py.minor
        );
    }
}
