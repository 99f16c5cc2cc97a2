//! GPU per line from the CUDA driver API, without a GPU: a fake `libcuda.so.1` (with
//! `cuGetProcAddress`, internal entries and an old signature), a library linked against it, the
//! fake runtime reaching the driver as the real one does, all built here with the system C
//! compiler and driven from Python (`tests/scripts/gpu_driver.py`) with sizes, copies and waits
//! known by construction. Also: `dlsym(RTLD_NEXT)` keeps its meaning with `dlsym` interposed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use mlprof::model::profile::{GpuLineCalls, Profile};

use crate::cpu::markers;
use crate::fixture;

const MIB: u64 = 1 << 20;
const SCRIPT: &str = "gpu_driver.py";

struct Libraries {
    driver: PathBuf,
    driver_framework: PathBuf,
    next_probe: PathBuf,
}

fn compile(args: &[&str], out: &Path, sources: &[PathBuf]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra"])
        .args(args)
        .arg("-o")
        .arg(out)
        .args(sources)
        .arg("-ldl")
        .status()
        .expect("a C compiler (cc)");
    assert!(built.success(), "{} compiles", out.display());
}

/// The fake driver, a library linked against it and the RTLD_NEXT probe, built once.
fn libraries() -> &'static Libraries {
    static LIBS: OnceLock<Libraries> = OnceLock::new();
    LIBS.get_or_init(|| {
        let dir = fixture::tempdir();
        let src = fixture::root().join("tests/fake-cuda");
        let driver = dir.join("libcuda.so.1");
        compile(
            &["-Wl,-soname,libcuda.so.1"],
            &driver,
            &[src.join("fake_cuda.c")],
        );
        let driver_framework = dir.join("libfakedriverframework.so");
        compile(
            &[],
            &driver_framework,
            &[src.join("fake_driver_framework.c"), driver.clone()],
        );
        let dep = dir.join("libnextprobedep.so");
        compile(
            &["-Wl,-soname,libnextprobedep.so"],
            &dep,
            &[src.join("next_probe_dep.c")],
        );
        let next_probe = dir.join("libnextprobe.so");
        compile(
            &["-Wl,-rpath,$ORIGIN", "-Wl,--no-as-needed"],
            &next_probe,
            &[src.join("next_probe.c"), dep],
        );
        Libraries {
            driver,
            driver_framework,
            next_probe,
        }
    })
}

fn args() -> Vec<String> {
    let l = libraries();
    [
        &l.driver,
        &l.driver_framework,
        crate::gpu_calls::framework(),
        &l.next_probe,
    ]
    .iter()
    .map(|p| p.to_str().unwrap().to_string())
    .collect()
}

/// The line marked `@name`, if the profile has it.
fn at<'p>(p: &'p Profile, name: &str) -> Option<&'p GpuLineCalls> {
    let line = markers(SCRIPT)[name];
    let path = fixture::script(SCRIPT);
    p.lines
        .iter()
        .find(|l| l.file == path.to_str().unwrap() && l.line == line)
        .map(|l| &l.measures.gpu_calls)
}

fn reserved(p: &Profile, name: &str) -> (u64, u64, u64, u64) {
    at(p, name).map_or((0, 0, 0, 0), |g| {
        (
            g.gpu_reserved_bytes,
            g.gpu_reserved_calls,
            g.gpu_peak_bytes,
            g.gpu_freed_bytes,
        )
    })
}

#[test]
fn driver_calls_reached_every_way_frameworks_reach_them_are_charged_exactly() {
    let py = fixture::pythons().last().unwrap();
    let args = args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let waits = fixture::tempdir().join("waits.json");
    let run = fixture::profile_script(
        py,
        SCRIPT,
        &args,
        &[
            ("MLPROF_GPU_LAUNCH_SAMPLE", "1"),
            ("WAIT_TIMES", waits.to_str().unwrap()),
        ],
    );
    let plain = Command::new(&py.exe)
        .arg(fixture::script(SCRIPT))
        .args(&args)
        .output()
        .unwrap();
    assert!(plain.status.success(), "{plain:?}");
    let stdout = String::from_utf8_lossy(&plain.stdout);
    // The program behaves as without mlprof; RTLD_NEXT from a library still finds the object
    // after it (2), not nothing (which it would if `dlsym` took mlprof for its caller).
    assert_eq!(String::from_utf8_lossy(&run.output.stdout), stdout);
    assert!(stdout.contains("next 2"), "{stdout}");
    let p = &run.profile;

    // Device memory, per way of reaching the driver (reserved, calls, held at the peak, freed).
    assert_eq!(reserved(p, "dlsym_alloc"), (64 * MIB, 1, 64 * MIB, 0));
    assert_eq!(reserved(p, "tmp"), (16 * MIB, 1, 0, 16 * MIB));
    assert_eq!(reserved(p, "proc_alloc"), (32 * MIB, 1, 32 * MIB, 0));
    // An older signature (32-bit sizes) is handed out unchanged: not seen.
    assert_eq!(reserved(p, "old_alloc"), (0, 0, 0, 0));
    // So is a version whose signatures are not known yet.
    assert_eq!(reserved(p, "future_alloc"), (0, 0, 0, 0));
    // Physical memory on device 1, through the runtime's entry point: both held at device
    // 1's peak, one given back.
    assert_eq!(reserved(p, "vmm"), (40 * MIB, 2, 40 * MIB, 20 * MIB));
    assert_eq!(reserved(p, "direct"), (12 * MIB, 1, 12 * MIB, 0));
    // The runtime's cudaMalloc gets its memory from the driver: told once.
    assert_eq!(reserved(p, "nested"), (4 * MIB, 1, 4 * MIB, 0));

    // Copies by direction.
    let copies = |name: &str| {
        at(p, name).map_or((0, 0, 0), |g| {
            (g.gpu_h2d_bytes, g.gpu_d2h_bytes, g.gpu_d2d_bytes)
        })
    };
    assert_eq!(copies("h2d"), (8 * MIB, 0, 0));
    assert_eq!(copies("d2h"), (0, 3 * MIB, 0));
    assert_eq!(copies("unified"), (0, 2 * MIB, 0));
    assert_eq!(copies("ptsz"), (MIB, 0, 0));

    // Launches, every one recorded; the wait within 5% of the call's wall time as the program
    // measured it (the fake's 0.2 s sleep, and on a busy machine the time the thread then
    // queued for a CPU), and 20 ms for the measurement's own edges.
    assert_eq!(at(p, "launch").map(|g| g.gpu_launches), Some(300));
    let measured: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&waits).unwrap()).unwrap();
    let truth = measured["sync"].as_f64().unwrap();
    assert!(truth >= 0.2, "the call took {truth:.3} s");
    let waited = at(p, "sync").map_or(0.0, |g| g.gpu_wait_s);
    assert!(
        waited >= 0.95 * truth && waited <= 1.05 * truth + 0.02,
        "@sync: {waited:.3} s of GPU wait for {truth:.3} s"
    );

    // Each device on its own: device 0 (the rest), device 1 (the physical memory).
    let process = p
        .processes
        .iter()
        .find_map(|p| p.gpu_calls.as_ref())
        .expect("a process with CUDA calls");
    let peak = |d: u32| {
        process
            .devices
            .iter()
            .find(|x| x.device == Some(d))
            .map(|x| (x.peak_bytes, x.end_bytes))
    };
    assert_eq!(peak(1), Some((40 * MIB, 20 * MIB)), "{process:?}");
    // @tmp was given back before the rest came: the peak is what is still held at the end.
    assert_eq!(
        peak(0),
        Some(((64 + 32 + 12 + 4) * MIB, (64 + 32 + 12 + 4) * MIB)),
        "{process:?}"
    );
}

#[test]
fn rtld_next_and_the_programs_own_lookups_are_unchanged_by_the_dlsym_hook() {
    // Without any CUDA loaded: dlsym(RTLD_NEXT) from a library finds the next object's symbol.
    let py = fixture::pythons().first().unwrap();
    let probe = libraries().next_probe.to_str().unwrap().to_string();
    let code = format!(
        "import ctypes, math; p = ctypes.CDLL({probe:?}); \
         libm = ctypes.CDLL('libm.so.6'); libm.cos.restype = ctypes.c_double; \
         libm.cos.argtypes = [ctypes.c_double]; \
         print(p.next_probe(), libm.cos(0.0), hasattr(p, 'no_such_symbol'))"
    );
    let out = fixture::tempdir().join("probe.json");
    let run = fixture::run(
        &["-q".as_ref(), "-o".as_ref(), out.as_os_str()],
        &[py.exe.as_os_str(), "-c".as_ref(), code.as_ref()],
        &[],
    );
    assert!(run.status.success(), "{run:?}");
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "2 1.0 False");
}
