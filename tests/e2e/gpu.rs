//! GPU (issue 9) without a GPU: the fake NVML library in `tests/fake-nvml`, built here with the
//! system C compiler and driven by a script, stands in for `libnvidia-ml.so`; the profiled
//! program tells the fake which phase it is in through a state file.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::cpu::{line, markers};
use crate::fixture::{self, os, within};

const GIB: u64 = 1 << 30;

/// The fake library, compiled once per test process.
pub fn fake_nvml() -> &'static PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = fixture::tempdir();
        let lib = dir.join("libfake-nvml.so");
        let source = fixture::root().join("tests/fake-nvml/fake_nvml.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let status = std::process::Command::new(cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-o"])
            .arg(&lib)
            .arg(&source)
            .status()
            .expect("a C compiler (cc)");
        assert!(status.success(), "the fake NVML library compiles");
        lib
    })
}

/// A script for the fake, sampling utilisation every 100 ms like a real driver and leaving out
/// idle processes: this process (`child` of the collector) at 0% with 512 MiB while
/// idle, 80% while busy, growing to 2.5 GiB in the middle of it, 0% with 2.5 GiB after; another process (pid 99999) busy
/// at 90% with 4 GiB throughout, which must never be charged to us.
fn script(dir: &std::path::Path, extra: &str) -> (PathBuf, PathBuf) {
    let state = dir.join("state");
    let path = dir.join("fake.nvml");
    let text = format!(
        "device Fake-H100 85899345920\n\
         state {state}\n\
         sample_period_ms 100\n\
         {extra}\n\
         row sidle 0 90 {idle_used} child:{idle}:0 99999:{other}:90\n\
         row sbusy 0 90 {idle_used} child:{idle}:80 99999:{other}:90\n\
         row sgrown 0 90 {busy_used} child:{busy}:80 99999:{other}:90\n\
         row safter 0 90 {busy_used} child:{busy}:0 99999:{other}:90\n",
        state = state.display(),
        idle = GIB / 2,
        busy = 5 * GIB / 2,
        other = 4 * GIB,
        idle_used = GIB / 2 + 4 * GIB,
        busy_used = 5 * GIB / 2 + 4 * GIB,
    );
    std::fs::write(&path, text).unwrap();
    (path, state)
}

fn run_phases(extra: &str) -> fixture::Run {
    let py = fixture::pythons().last().unwrap();
    let dir = fixture::tempdir();
    let (nvml_script, state) = script(&dir, extra);
    let lib = fake_nvml().to_str().unwrap().to_string();
    let run = fixture::profile_args(
        &["--gpu-lib", &lib, "--gpu-rate", "20"],
        &[
            os(&py.exe),
            os(&fixture::script("gpu_phases.py")),
            os(&state),
            os("1.0"),
        ],
        &[("MLPROF_FAKE_NVML_SCRIPT", nvml_script.to_str().unwrap())],
    );
    assert!(
        run.output.status.success(),
        "{}",
        String::from_utf8_lossy(&run.output.stderr)
    );
    run
}

#[test]
fn a_line_running_while_the_gpu_is_80_percent_busy_and_grows_2_gib_gets_those_figures() {
    let m = markers("gpu_phases.py");
    let run = run_phases("");
    let p = &run.profile;
    assert!(p.gpu.available, "{:?}", p.gpu.reason);
    assert_eq!(p.gpu.devices.len(), 1);
    assert_eq!(p.gpu.devices[0].name, "Fake-H100");
    assert_eq!(
        p.gpu.peak_memory_bytes,
        5 * GIB / 2,
        "the tree's own peak, not the device's and not the other process's"
    );
    let me = p.processes.iter().find(|q| q.python.is_some()).unwrap();
    assert_eq!(me.peak_gpu_memory_bytes, 5 * GIB / 2);
    assert!(p.gpu.timeline.len() > 20, "{}", p.gpu.timeline.len());
    assert!(p
        .gpu
        .timeline
        .iter()
        .all(|s| s.util_pct <= 80.0 && s.memory_bytes <= 5 * GIB / 2));

    let busy = line(p, "gpu_phases.py", m["busy"]);
    assert!(
        within(busy.measures.gpu_util_pct, 80.0, 0.10),
        "busy line: {}%",
        busy.measures.gpu_util_pct
    );
    assert!(
        within(
            busy.measures.gpu_memory_bytes as f64,
            2.0 * GIB as f64,
            0.10
        ),
        "busy line grew {} bytes; lines {:?}; timeline {:?}",
        busy.measures.gpu_memory_bytes,
        p.lines
            .iter()
            .map(|l| (l.line, l.measures.gpu_memory_bytes))
            .collect::<Vec<_>>(),
        p.gpu
            .timeline
            .iter()
            .map(|s| (s.t_s, s.memory_bytes >> 20))
            .collect::<Vec<_>>()
    );
    for quiet in ["idle", "after"] {
        let l = line(p, "gpu_phases.py", m[quiet]);
        assert!(
            l.measures.gpu_util_pct < 20.0,
            "{quiet} line: {}% (the other process's 90% is not ours)",
            l.measures.gpu_util_pct
        );
    }
    let after = line(p, "gpu_phases.py", m["after"]);
    assert!(after.measures.gpu_memory_bytes < GIB / 10);
    let average = p.gpu.average_util_pct;
    assert!(average > 20.0 && average < 60.0, "average {average}");

    let text = fixture::mlprof()
        .arg("report")
        .arg("--text")
        .arg(write(p))
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("Fake-H100"), "{text}");
    assert!(text.contains("GPU%"), "a GPU column: {text}");

    // The GPU memory budget: 2.5 GiB is over 2 GiB, naming the line that grew it; 3 GiB passes.
    let saved = write(p);
    let over = fixture::mlprof()
        .args(["check", "--max-gpu-memory", "2GiB"])
        .arg(&saved)
        .output()
        .unwrap();
    assert_eq!(over.status.code(), Some(97));
    let said = String::from_utf8_lossy(&over.stderr);
    assert!(
        said.contains("peak GPU memory 2.5 GiB > 2.0 GiB")
            && said.contains(&format!("gpu_phases.py:{} grew it", m["busy"])),
        "{said}"
    );
    let under = fixture::mlprof()
        .args(["check", "--max-gpu-memory", "3GiB"])
        .arg(&saved)
        .status()
        .unwrap();
    assert_eq!(under.code(), Some(0));
}

fn write(p: &mlprof::model::Profile) -> PathBuf {
    let path = fixture::tempdir().join("gpu.json");
    std::fs::write(&path, serde_json::to_string(p).unwrap()).unwrap();
    path
}

#[test]
fn nvml_failing_mid_run_leaves_a_note_and_the_data_until_then() {
    let run = run_phases("fail_after 40");
    let p = &run.profile;
    assert!(p.gpu.available);
    assert!(
        p.gpu
            .notes
            .iter()
            .any(|n| n.contains("GPU polling stopped") && n.contains("NVML error")),
        "{:?}",
        p.gpu.notes
    );
    assert!(!p.gpu.timeline.is_empty() && p.gpu.timeline.len() < 40);
    assert_eq!(p.exit.code, Some(0));
}

#[test]
fn without_nvml_the_report_says_not_available_once_and_nothing_else_changes() {
    let py = fixture::pythons().last().unwrap();
    let missing = "/nonexistent/libnvidia-ml.so.1";
    let run = fixture::profile_args(
        &["--gpu-lib", missing],
        &[os(&py.exe), os("-c"), os("print(7)")],
        &[],
    );
    assert_eq!(run.output.stdout, b"7\n");
    assert!(!run.profile.gpu.available);
    assert_eq!(
        run.profile.gpu.reason.as_deref(),
        Some(format!("{missing} not found").as_str())
    );
    let text = fixture::mlprof()
        .args(["run", "--gpu-lib", missing, "--"])
        .arg(&py.exe)
        .args(["-c", "print(7)"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert_eq!(stderr.matches("not available").count(), 1, "once: {stderr}");
    assert!(stderr.contains(&format!(
        "GPU             not available ({missing} not found)"
    )));
    assert!(!stderr.contains("GPU%"), "no GPU columns without data");

    // A GPU budget that cannot be checked fails rather than passing silently.
    let gated = fixture::mlprof()
        .args([
            "run",
            "-q",
            "--gpu-lib",
            missing,
            "--max-gpu-memory",
            "1GiB",
            "--",
        ])
        .arg(&py.exe)
        .args(["-c", "pass"])
        .output()
        .unwrap();
    assert_eq!(gated.status.code(), Some(97));
    assert!(String::from_utf8_lossy(&gated.stderr).contains("budget not checked: peak GPU memory"));
}
