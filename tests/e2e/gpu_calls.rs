//! GPU per line from the CUDA calls, without a GPU: a fake CUDA runtime (`libcudart.so.13` with
//! the real one's symbol version) and a fake framework library linked against it
//! (`tests/fake-cuda`), both built here with the system C compiler, driven from Python through
//! ctypes (`tests/scripts/gpu_calls.py`) with sizes, copies and waits known by construction.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use mlprof::model::profile::{GpuLineCalls, Profile};

use crate::cpu::{line, markers};
use crate::fixture::{self, os};

const MIB: u64 = 1 << 20;
const SCRIPT: &str = "gpu_calls.py";

/// The fake runtime and framework, built once per test process: the framework's path.
pub(crate) fn framework() -> &'static PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = fixture::tempdir();
        let src = fixture::root().join("tests/fake-cuda");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let runtime = dir.join("libcudart.so.13");
        let built = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra"])
            .arg("-Wl,-soname,libcudart.so.13")
            .arg(format!(
                "-Wl,--version-script={}",
                src.join("fake_cudart.map").display()
            ))
            .arg("-o")
            .arg(&runtime)
            .arg(src.join("fake_cudart.c"))
            .status()
            .expect("a C compiler (cc)");
        assert!(built.success(), "the fake CUDA runtime compiles");
        let lib = dir.join("libfakeframework.so");
        let built = Command::new(&cc)
            .args([
                "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-pthread", "-o",
            ])
            .arg(&lib)
            .arg(src.join("fake_framework.c"))
            .arg(&runtime)
            .arg("-Wl,-rpath,$ORIGIN")
            .status()
            .expect("a C compiler (cc)");
        assert!(built.success(), "the fake framework compiles");
        lib
    })
}

/// The line marked `@name` in the script.
fn at<'p>(p: &'p Profile, name: &str) -> &'p GpuLineCalls {
    let marks = markers(SCRIPT);
    &line(p, SCRIPT, marks[name]).measures.gpu_calls
}

fn profile(env: &[(&str, &str)]) -> (fixture::Run, String) {
    let py = fixture::pythons().last().unwrap();
    let lib = framework().to_str().unwrap().to_string();
    let run = fixture::profile_script(py, SCRIPT, &[&lib], env);
    // What the program printed without mlprof: the same.
    let plain = Command::new(&py.exe)
        .arg(fixture::script(SCRIPT))
        .arg(&lib)
        .output()
        .unwrap();
    assert!(plain.status.success());
    let stdout = String::from_utf8_lossy(&plain.stdout).into_owned();
    (run, stdout)
}

#[test]
fn the_framework_refers_to_the_runtime_by_versioned_symbols() {
    // The case frameworks are in (torch: `cudaMalloc@libcudart.so.13`): the hooks must bind
    // such references, not only plain ones.
    let out = Command::new("nm").arg("-D").arg(framework()).output();
    let Ok(out) = out else {
        fixture::skipped("nm (binutils) is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cudaMalloc@libcudart.so.13"), "{text}");
}

#[test]
fn gpu_memory_copies_launches_and_waits_are_charged_exactly_to_their_lines() {
    let waits_file = fixture::tempdir().join("waits.json");
    // Every launch recorded with its stack: 64,000 in one C loop would be about 256,000 slots,
    // more than the collector drains of a 16,384-slot ring in that time on a slow machine (the
    // channel then drops records, and says so); 1,500 fit beside the rest.
    let (run, plain_stdout) = profile(&[
        ("MLPROF_GPU_LAUNCH_SAMPLE", "1"),
        ("MANY_LAUNCHES", "1500"),
        ("WAIT_TIMES", waits_file.to_str().unwrap()),
    ]);
    assert_eq!(String::from_utf8_lossy(&run.output.stdout), plain_stdout);
    assert!(plain_stdout.contains("last error 7"), "{plain_stdout}");
    let p = &run.profile;
    assert_eq!(p.dropped_events, 0, "every record reached the collector");

    // Device memory: reserved, held at the peak, given back.
    let expect = |name: &str, reserved: u64, calls: u64, peak: u64, freed: u64| {
        let g = at(p, name);
        let got = (
            g.gpu_reserved_bytes,
            g.gpu_reserved_calls,
            g.gpu_peak_bytes,
            g.gpu_freed_bytes,
        );
        assert_eq!(
            got,
            (reserved * MIB, calls, peak * MIB, freed * MIB),
            "@{name}"
        );
    };
    expect("keep", 288, 3, 288, 0);
    expect("tmp", 40, 1, 0, 40);
    expect("async", 24, 1, 24, 0);
    expect("managed", 8, 1, 8, 0);
    expect("peak", 160, 1, 160, 160);
    // Pinned host memory; cudaHostAlloc calls cudaMallocHost inside the fake runtime: counted
    // once.
    assert_eq!(at(p, "pinned").gpu_pinned_bytes, 6 * MIB);
    assert_eq!(at(p, "pinned_tmp").gpu_pinned_bytes, 2 * MIB);

    // Copies by direction, `cudaMemcpyDefault` told apart by the pointers.
    assert_eq!(at(p, "h2d").gpu_h2d_bytes, 20 * MIB);
    assert_eq!(at(p, "d2h").gpu_d2h_bytes, 3 * MIB);
    assert_eq!(at(p, "d2d").gpu_d2d_bytes, 2 * MIB);
    assert_eq!(at(p, "peer").gpu_d2d_bytes, MIB);
    assert_eq!(at(p, "copy2d").gpu_h2d_bytes, 512 * 256);
    // An error was pending: the pointers were not asked about, the direction is not known.
    // The line may hold no record at all (its one copy goes in no direction, and its CPU may
    // fall between samples): absent, it copied nothing in any direction either.
    let file = fixture::script(SCRIPT);
    let unknown = p
        .lines
        .iter()
        .find(|l| {
            l.file == file.to_str().unwrap() && l.line == markers(SCRIPT)["unknown_direction"]
        })
        .map(|l| l.measures.gpu_calls)
        .unwrap_or_default();
    assert_eq!(
        unknown.gpu_h2d_bytes + unknown.gpu_d2h_bytes + unknown.gpu_d2d_bytes,
        0
    );

    // Launches, every one recorded.
    assert_eq!(at(p, "launch").gpu_launches, 2000);
    assert_eq!(at(p, "graph").gpu_launches, 50);
    assert_eq!(at(p, "many").gpu_launches, 1500);

    // GPU waits: each call's wall time as the program measured it around the call (the
    // fake's sleeps, 0.2 and 0.15 s, and its 0.3 s spin, plus on a busy machine the time the
    // thread then queued for a CPU), within 5%, and 20 ms for the measurement's own edges.
    let measured: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&waits_file).unwrap()).unwrap();
    // What one sample may carry across a line's boundary: two mean gaps, or the run's largest
    // sample where the kernel's timers fire late (a loaded machine).
    let lost = fixture::straddle(p, 2.0);
    for (name, least, slack) in [
        ("sync", 0.2, 0.02),
        ("event", 0.15, 0.02),
        // Spinning: the CPU part is sampled, within the samples straddling its ends.
        ("spin", 0.3, 0.02 + lost),
    ] {
        let truth = measured[name].as_f64().unwrap();
        assert!(truth >= least, "@{name}: the call took {truth:.3} s");
        let m = &line(p, SCRIPT, markers(SCRIPT)[name]).measures;
        let waited = m.gpu_calls.gpu_wait_s;
        assert!(
            waited >= truth * 0.95 - if name == "spin" { lost } else { 0.0 }
                && waited <= truth * 1.05 + slack,
            "@{name}: {waited:.3} s of GPU wait for {truth} s"
        );
        // Waiting for the GPU is waiting, not native time (the spin ran in the runtime). The
        // line's own call through ctypes is native and may catch a sample, which on a loaded
        // machine weighs up to two mean gaps (loaded run 13: 12.8 ms in ctypes' `_get_name`),
        // or the run's largest sample.
        assert!(m.cpu_native_s <= lost, "@{name}: {m:?}");
        assert!(
            m.waiting_s >= waited - 1e-9,
            "@{name}: part of system/waiting"
        );
    }

    // The process's totals and its device peak: 288 + 24 + 8 + 160 MiB, 320 still held.
    let process = p
        .processes
        .iter()
        .find(|p| p.gpu_calls.is_some())
        .expect("a process with CUDA calls");
    let calls = process.gpu_calls.as_ref().unwrap();
    assert_eq!(calls.devices.len(), 1, "{calls:?}");
    let device = &calls.devices[0];
    assert_eq!(device.device, Some(0));
    assert_eq!(
        (device.peak_bytes, device.end_bytes),
        (480 * MIB, 320 * MIB)
    );
    // Its timeline: every allocation and free of the script in order, the peak where it was
    // first reached, the last point what was held at the end.
    let held: Vec<u64> = device.timeline.iter().map(|s| s.bytes / MIB).collect();
    assert_eq!(held, [96, 192, 288, 328, 288, 312, 320, 480, 320]);
    let top = device.timeline.iter().max_by_key(|s| s.bytes).unwrap();
    assert_eq!((top.bytes, top.t_s), (device.peak_bytes, device.at_s));
    assert_eq!(device.timeline.last().unwrap().bytes, device.end_bytes);
    assert_eq!(calls.pinned_peak_bytes, 8 * MIB);
    assert_eq!(
        calls.totals.gpu_reserved_bytes,
        (288 + 40 + 24 + 8 + 160) * MIB
    );
    assert_eq!(calls.totals.gpu_launches, 2000 + 50 + 1500 + 2);
}

#[test]
fn launches_are_sampled_without_bias_by_default_and_the_rest_stays_exact() {
    let (run, _) = profile(&[]);
    let p = &run.profile;
    // Each launch is taken with probability 1/64 and stands for 64: the count's standard
    // deviation is sqrt(n * 64 * 63/64). Within four of them.
    for (name, n) in [("many", 64000.0), ("launch", 2000.0)] {
        let got = at(p, name).gpu_launches as f64;
        let sd = (n * 63.0f64).sqrt();
        assert!(
            (got - n).abs() <= 4.0 * sd,
            "@{name}: {got} launches for {n}"
        );
    }
    assert_eq!(at(p, "keep").gpu_peak_bytes, 288 * MIB);
    assert_eq!(at(p, "h2d").gpu_h2d_bytes, 20 * MIB);
}

#[test]
fn a_program_that_never_uses_cuda_loads_nothing_and_gets_no_gpu_figures() {
    let py = fixture::pythons().last().unwrap();
    // It may still find the hooks by name in the global scope (they are exported): calling one
    // then says the runtime is unusable (`cudaErrorUnknown`) instead of touching anything.
    let code = "import ctypes\n\
                maps = open('/proc/self/maps').read()\n\
                out = ctypes.c_void_p()\n\
                found = ctypes.CDLL(None).cudaMalloc(ctypes.byref(out), 16)\n\
                print('cudart loaded' if 'libcudart' in maps else 'no cudart', found, out.value)\n";
    let run = fixture::profile(&[os(&py.exe), os("-c"), os(code)]);
    assert!(run.output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&run.output.stdout).trim(),
        "no cudart 999 None"
    );
    assert!(run.profile.processes.iter().all(|p| p.gpu_calls.is_none()));
    assert!(run
        .profile
        .lines
        .iter()
        .all(|l| l.measures.gpu_calls.is_empty()));
}

#[test]
fn every_byte_nvml_reports_is_held_by_lines_or_named_as_not_seen() {
    // The fake NVML reports 1 GiB for the program from the start to its end: at its last such
    // reading the calls hold 320 MiB (@keep, @async, @managed: the program waits 0.65 s for the
    // GPU after its last allocation), so 704 MiB is the context and what the calls did not see.
    let dir = fixture::tempdir();
    let nvml_script = dir.join("fake.nvml");
    std::fs::write(
        &nvml_script,
        format!(
            "device Fake-H100 85899345920\nrow t0 0 50 {gib} desc:{gib}:50\n",
            gib = 1u64 << 30
        ),
    )
    .unwrap();
    let nvml = crate::gpu::fake_nvml().to_str().unwrap().to_string();
    let py = fixture::pythons().last().unwrap();
    let lib = framework().to_str().unwrap().to_string();
    let run = fixture::profile_args(
        &["--gpu-lib", &nvml, "--gpu-rate", "20"],
        &[os(&py.exe), os(&fixture::script(SCRIPT)), os(&lib)],
        &[("MLPROF_FAKE_NVML_SCRIPT", nvml_script.to_str().unwrap())],
    );
    assert!(run.output.status.success());
    let p = &run.profile;
    let calls = p
        .processes
        .iter()
        .find(|q| q.python.is_some())
        .and_then(|q| q.gpu_calls.as_ref())
        .expect("the program's CUDA calls");
    let split = calls.nvml.as_ref().expect("NVML's view of the program");
    assert_eq!(split.peak_bytes, 1 << 30);
    assert_eq!(split.through_calls_bytes, 320 * MIB, "{split:?}");
    assert_eq!(
        split.through_calls_bytes + split.not_seen_bytes,
        split.peak_bytes
    );
    // A process NVML saw that made no call we saw (a launcher shim, here): all of it not seen.
    for q in p.processes.iter().filter(|q| q.python.is_none()) {
        if let Some(n) = q.gpu_calls.as_ref().and_then(|c| c.nvml.as_ref()) {
            assert_eq!((n.through_calls_bytes, n.not_seen_bytes), (0, n.peak_bytes));
        }
    }
}

#[test]
fn a_gpu_reserved_budget_fails_the_run_naming_the_line_that_held_most_at_the_peak() {
    let py = fixture::pythons().last().unwrap();
    let lib = framework().to_str().unwrap().to_string();
    let script = fixture::script(SCRIPT);
    let argv = [os(&py.exe), os(&script), os(&lib)];
    // The device peak is 480 MiB, @keep holding 288 MiB of it.
    let over = fixture::profile_args(&["--max-gpu-reserved", "400MiB"], &argv, &[]);
    assert_eq!(over.output.status.code(), Some(97), "exceeded: exit 97");
    let v = &over.profile.violations;
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].budget.as_str(), "gpu_reserved");
    assert_eq!(v[0].line, Some(markers(SCRIPT)["keep"]), "{}", v[0].message);
    assert!(
        v[0].message.contains("480.0 MiB > 400.0 MiB"),
        "{}",
        v[0].message
    );
    let stderr = String::from_utf8_lossy(&over.output.stderr);
    assert!(stderr.contains("GPU memory reserved by pid"), "{stderr}");
    let within = fixture::profile_args(&["--max-gpu-reserved", "480MiB"], &argv, &[]);
    assert_eq!(within.output.status.code(), Some(0));
    assert!(within.profile.violations.is_empty());
}

#[test]
fn diff_shows_the_exact_change_of_gpu_memory_held_and_nothing_for_unchanged_copies() {
    let py = fixture::pythons().last().unwrap();
    let lib = framework().to_str().unwrap().to_string();
    let script = fixture::script(SCRIPT);
    let dir = fixture::tempdir();
    let (base, new) = (dir.join("base.json"), dir.join("new.json"));
    let program = [os(&py.exe), os(&script), os(&lib)];
    fixture::run_to(&base, &program, &[]);
    fixture::run_to(&new, &program, &[("KEEP_MIB", "128")]);
    let out = fixture::mlprof()
        .args(["diff", "--json"])
        .arg(&base)
        .arg(&new)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines = d["lines"].as_array().unwrap();
    let keep = markers(SCRIPT)["keep"];
    let row = lines
        .iter()
        .find(|l| l["line"] == keep)
        .unwrap_or_else(|| panic!("@keep is not among the changed lines: {lines:?}"));
    assert_eq!(row["gpu_peak_bytes_delta"], 3 * 32 * MIB, "{row}");
    assert!(row["meaningful"]
        .as_array()
        .unwrap()
        .contains(&"gpu_peak_bytes".into()));
    // The copies did not change: no line has a GPU copy change.
    assert!(
        lines.iter().all(|l| l["gpu_copy_bytes_delta"] == 0),
        "{lines:?}"
    );
    let text = fixture::mlprof()
        .arg("diff")
        .arg(&base)
        .arg(&new)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("GPU held") && text.contains("+96.0 MiB"),
        "{text}"
    );
}

#[test]
fn the_html_page_carries_the_cuda_call_figures_and_shows_their_columns() {
    let py = fixture::pythons().last().unwrap();
    let lib = framework().to_str().unwrap().to_string();
    let out = fixture::mlprof()
        .args(["run", "--html", "--"])
        .arg(&py.exe)
        .arg(fixture::script(SCRIPT))
        .arg(&lib)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8(out.stdout).unwrap();
    let doc = scraper::Html::parse_document(&page);
    let json = scraper::Selector::parse("script[type='application/json']").unwrap();
    let embedded = doc.select(&json).next().expect("the embedded profile");
    let p: serde_json::Value = serde_json::from_str(&embedded.inner_html()).unwrap();
    let keep = markers(SCRIPT)["keep"];
    let line = p["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["line"] == keep)
        .expect("@keep in the page's profile");
    assert_eq!(line["gpu_peak_bytes"], 288 * MIB);
    // The device's timeline, drawn beside the other timelines with its peak marked.
    let device = p["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|q| q["gpu_calls"]["devices"].get(0))
        .expect("a device with CUDA calls");
    let points = device["timeline"].as_array().unwrap();
    let top = points.iter().filter_map(|s| s["bytes"].as_u64()).max();
    assert_eq!(top, Some(480 * MIB));
    assert!(page.contains("GPU memory held through CUDA calls"));
    // The page's code draws the columns from those fields.
    for column in [
        "GPU held at its peak",
        "GPU copied",
        "GPU wait",
        "kernel launches",
    ] {
        assert!(page.contains(column), "{column}");
    }
}

#[test]
fn hints_name_the_line_waiting_for_the_gpu_and_large_host_to_device_copies_only() {
    let py = fixture::pythons().last().unwrap();
    let lib = framework().to_str().unwrap().to_string();
    let marks = markers(SCRIPT);
    let hints_of = |env: &[(&str, &str)]| {
        let run = fixture::profile_script(py, SCRIPT, &[&lib], env);
        run.profile
            .hints
            .iter()
            .map(|h| (h.kind.as_str().to_string(), h.line.unwrap_or(0)))
            .collect::<Vec<_>>()
    };
    // The spin (0.3 s) and the sync (0.2 s) each wait a fifth of the run or more; @h2d copies
    // 20 MiB, below the copy hint's 64 MiB.
    let hints = hints_of(&[]);
    assert!(
        hints.contains(&("gpu_wait".into(), marks["spin"])),
        "{hints:?}"
    );
    assert!(!hints.iter().any(|h| h.0 == "gpu_copies"), "{hints:?}");
    // 20 copies of 4 MiB: 80 MiB host to device.
    let hints = hints_of(&[("H2D_STEPS", "20")]);
    assert!(
        hints.contains(&("gpu_copies".into(), marks["h2d"])),
        "{hints:?}"
    );
}

#[test]
fn the_trees_totals_sum_its_processes_cuda_calls() {
    // Two processes each making the script's calls: the tree's totals are twice one's.
    let py = fixture::pythons().last().unwrap();
    let code = format!(
        "import subprocess, sys\nfor _ in range(2):\n    subprocess.run([sys.executable, {:?}, {:?}], check=True)\n",
        fixture::script(SCRIPT).to_str().unwrap(),
        framework().to_str().unwrap()
    );
    let run = fixture::profile(&[os(&py.exe), os("-c"), os(&code)]);
    let p = &run.profile;
    let each: Vec<_> = p
        .processes
        .iter()
        .filter_map(|q| q.gpu_calls.as_ref())
        .collect();
    assert_eq!(each.len(), 2, "{:?}", p.processes);
    let tree = p.gpu.calls.expect("the tree's CUDA-call totals");
    assert_eq!(tree.gpu_reserved_bytes, 2 * (288 + 40 + 24 + 8 + 160) * MIB);
    assert_eq!(
        tree.gpu_h2d_bytes,
        each[0].totals.gpu_h2d_bytes + each[1].totals.gpu_h2d_bytes
    );
    assert_eq!(tree.gpu_pinned_bytes, 2 * 8 * MIB);
}
