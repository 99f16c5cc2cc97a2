//! GPU kernel time per line, without a GPU: the fake CUDA runtime tells a fake CUPTI
//! (`tests/fake-cuda/fake_cupti.c`, the activity API as CUPTI's headers define it) of every
//! kernel it "runs", with the name and device time the script set, so every figure is known by
//! construction (`tests/scripts/gpu_kernels.py`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use mlprof::model::profile::{GpuLineCalls, LineStats, ProcessKernels, Profile};

use crate::cpu::{line, markers};
use crate::fixture::{self, os};

const SCRIPT: &str = "gpu_kernels.py";

/// Build `source` (in tests/fake-cuda) into `out` with `args` after it.
fn cc(out: &Path, source: &str, args: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let src = fixture::root().join("tests/fake-cuda");
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra"])
        .args(args.iter().filter(|a| a.starts_with("-Wl,-soname")))
        .arg("-o")
        .arg(out)
        .arg(src.join(source))
        .args(args.iter().filter(|a| !a.starts_with("-Wl,-soname")))
        .status()
        .expect("a C compiler (cc)");
    assert!(built.success(), "{source} compiles");
}

/// The fake runtime and a framework linked against it in a directory of their own, with the
/// fake CUPTI beside them (as the `nvidia-cuda-cupti` wheel puts it) when `cupti`, and the
/// program's own profiler linked against it: (framework, profiler).
fn libraries(cupti: bool) -> &'static (PathBuf, PathBuf) {
    static WITH: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    static WITHOUT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let cell = if cupti { &WITH } else { &WITHOUT };
    cell.get_or_init(|| {
        let dir = fixture::tempdir();
        let map = fixture::root().join("tests/fake-cuda/fake_cudart.map");
        let runtime = dir.join("libcudart.so.13");
        let script = format!("-Wl,--version-script={}", map.display());
        cc(
            &runtime,
            "fake_cudart.c",
            &["-Wl,-soname,libcudart.so.13", &script],
        );
        let framework = dir.join("libfakeframework.so");
        let rt = runtime.to_str().unwrap();
        cc(&framework, "fake_framework.c", &[rt, "-Wl,-rpath,$ORIGIN"]);
        let profiler = dir.join("libfakeprofiler.so");
        if cupti {
            let lib = dir.join("libcupti.so.13");
            cc(&lib, "fake_cupti.c", &["-Wl,-soname,libcupti.so.13"]);
            let lib = lib.to_str().unwrap();
            cc(&profiler, "fake_profiler.c", &[lib, "-Wl,-rpath,$ORIGIN"]);
        }
        (framework, profiler)
    })
}

fn at<'p>(p: &'p Profile, script: &str, name: &str) -> &'p LineStats {
    line(p, script, markers(script)[name])
}

fn kernels(p: &Profile) -> &ProcessKernels {
    p.processes[0]
        .gpu_calls
        .as_ref()
        .and_then(|g| g.kernels.as_ref())
        .expect("the process says how its kernels were recorded")
}

/// Run the script under mlprof and without it: the profile, and both standard outputs.
fn profiled(script: &str, args: &[&Path], env: &[(&str, &str)]) -> (fixture::Run, String, String) {
    let py = fixture::pythons().last().unwrap();
    let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
    let run = fixture::profile_script(py, script, &args, env);
    let plain = Command::new(&py.exe)
        .arg(fixture::script(script))
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(plain.status.success());
    let ours = String::from_utf8_lossy(&run.output.stdout).into_owned();
    (
        run,
        ours,
        String::from_utf8_lossy(&plain.stdout).into_owned(),
    )
}

#[test]
fn kernel_time_goes_exactly_to_the_lines_that_launched_the_kernels() {
    let (framework, _) = libraries(true);
    let (run, ours, plain) = profiled(SCRIPT, &[framework], &[("MLPROF_GPU_LAUNCH_SAMPLE", "1")]);
    assert_eq!(ours, plain, "the program's output is its own");
    let p = &run.profile;
    // Every launch sampled: every figure exact.
    for (name, seconds, count, kernel) in [
        ("small", 0.3, 3000, "gemm_small"),
        ("large", 0.4, 20, "attention_large"),
        ("shared", 0.1, 1000, "gemm_small"),
    ] {
        let l = at(p, SCRIPT, name);
        let g: &GpuLineCalls = &l.measures.gpu_calls;
        assert!(
            (g.gpu_kernel_s - seconds).abs() < 1e-6 && g.gpu_kernels == count,
            "@{name}: {g:?}"
        );
        let names = &l.measures.gpu_kernel_names;
        assert_eq!(names.len(), 1, "@{name}: {names:?}");
        assert_eq!(names[0].name, kernel);
    }
    assert_eq!(at(p, SCRIPT, "sync").measures.gpu_calls.gpu_kernel_s, 0.0);
    let k = kernels(p);
    assert_eq!((k.state.as_str(), k.kernels), ("on", 4020), "{k:?}");
    assert!((k.gpu_kernel_s - 0.8).abs() < 1e-6, "{k:?}");
    assert_eq!(k.unattributed_s, 0.0, "{k:?}");
    assert_eq!(k.top[0].name, "attention_large", "most device time first");
    // The text report shows the line's GPU time and its kernel.
    let text = mlprof::render::text::render(p);
    assert!(text.contains("attention_large"), "{text}");
}

#[test]
fn sampled_launches_share_each_kernels_exact_time_among_its_lines() {
    // The default: one launch in 64, and the first of every kernel. A kernel launched from one
    // line is that line's whole, however few its launches (@large: 20); one launched from two
    // lines is shared in proportion to their samples, its total exact.
    let (framework, _) = libraries(true);
    let (run, _, _) = profiled(SCRIPT, &[framework], &[]);
    let p = &run.profile;
    let g = |name| at(p, SCRIPT, name).measures.gpu_calls;
    let large = g("large");
    assert!(
        (large.gpu_kernel_s - 0.4).abs() < 1e-6 && large.gpu_kernels == 20,
        "{large:?}"
    );
    let (small, shared) = (g("small"), g("shared"));
    assert!(
        (small.gpu_kernel_s + shared.gpu_kernel_s - 0.4).abs() < 1e-6,
        "{small:?} {shared:?}"
    );
    // @small's share of `gemm_small` is 3/4, drawn from about 4000/64 launch samples: four
    // standard deviations of a share of that many, of the name's 0.4 s.
    let sd = 0.4 * (0.75f64 * 0.25 / (4000.0 / 64.0)).sqrt();
    assert!(
        (small.gpu_kernel_s - 0.3).abs() <= 4.0 * sd,
        "@small {:.3} s of 0.3 (sd {sd:.3})",
        small.gpu_kernel_s
    );
    let k = kernels(p);
    assert!(
        (k.gpu_kernel_s - 0.8).abs() < 1e-6 && k.unattributed_s == 0.0,
        "{k:?}"
    );
}

#[test]
fn without_cupti_or_when_turned_off_the_report_says_why() {
    let (framework, _) = libraries(false);
    let (run, ours, plain) = profiled(SCRIPT, &[framework], &[]);
    assert_eq!(ours, plain);
    let k = kernels(&run.profile);
    assert_eq!(k.state, "no_cupti", "{k:?}");
    assert!(k.note.contains("CUPTI"), "{k:?}");
    assert!(
        run.profile
            .lines
            .iter()
            .all(|l| l.measures.gpu_calls.gpu_kernel_s == 0.0),
        "no line has GPU time without CUPTI"
    );
    let text = mlprof::render::text::render(&run.profile);
    assert!(text.contains("no CUPTI library"), "{text}");
    // Asked not to (`--no-gpu-time`): CUPTI is never looked for.
    let (with, _) = libraries(true);
    let py = fixture::pythons().last().unwrap();
    let script = fixture::script(SCRIPT);
    let argv = [os(&py.exe), os(&script), os(with)];
    let run = fixture::profile_args(&["--no-gpu-time"], &argv, &[]);
    let calls = run.profile.processes[0].gpu_calls.as_ref().unwrap();
    assert!(calls.kernels.is_none(), "{:?}", calls.kernels);
}

#[test]
fn a_program_that_takes_cupti_for_its_own_profiler_keeps_it() {
    // Linked against CUPTI (Kineto), and through the function looked up with `dlsym` (XLA).
    for lookup in ["linked", "dlsym"] {
        program_owns(lookup);
    }
}

fn program_owns(lookup: &str) {
    let script = "gpu_own_profiler.py";
    let (framework, profiler) = libraries(true);
    let (run, ours, plain) = profiled(script, &[framework, profiler], &[("LOOKUP", lookup)]);
    assert_eq!(plain.trim(), "own profiler saw 300 kernels");
    assert_eq!(ours, plain, "its profiler sees what it sees without mlprof");
    let p = &run.profile;
    let k = kernels(p);
    assert_eq!(k.state, "program_owns", "{k:?}");
    assert!(k.note.contains("profiler of its own"), "{k:?}");
    // The kernels before it took CUPTI are counted, on their line.
    assert_eq!(k.kernels, 500, "{k:?}");
    let before = at(p, script, "before").measures.gpu_calls;
    assert!((before.gpu_kernel_s - 0.005).abs() < 1e-6, "{before:?}");
    // Nothing after it: the line may hold no sample at all (its launches are sampled and its
    // 3 ms of CPU may fall between ticks), and if it is there it holds no GPU time.
    let file = fixture::script(script);
    let after = p
        .lines
        .iter()
        .find(|l| l.file == file.to_str().unwrap() && l.line == markers(script)["after"]);
    let seconds = after.map_or(0.0, |l| l.measures.gpu_calls.gpu_kernel_s);
    assert_eq!(seconds, 0.0, "{after:?}");
}

#[test]
fn the_html_page_carries_gpu_time_and_shows_its_column_and_kernels() {
    let (framework, _) = libraries(true);
    let py = fixture::pythons().last().unwrap();
    let out = fixture::mlprof()
        .args(["run", "--html", "--"])
        .arg(&py.exe)
        .arg(fixture::script(SCRIPT))
        .arg(framework)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8(out.stdout).unwrap();
    let p = crate::gpu_regions::embedded(&page);
    let line = at(&p, SCRIPT, "large");
    let seconds = line.measures.gpu_calls.gpu_kernel_s;
    assert!((seconds - 0.4).abs() < 1e-6, "{line:?}");
    assert_eq!(line.measures.gpu_kernel_names[0].name, "attention_large");
    assert_eq!(kernels(&p).state, "on");
    // The page's code draws the column and the process's kernels from those fields.
    for drawn in [
        "GPU time (kernels, by CUPTI)",
        "\"GPU time\"",
        "gpu_kernel_names",
    ] {
        assert!(page.contains(drawn), "{drawn}");
    }
}

#[test]
fn diff_names_the_line_whose_gpu_time_changed() {
    // @large's kernels take 20 ms, then 35 ms: 0.4 s → 0.7 s of GPU time; nothing else moves
    // (every launch sampled, so the shared kernel's split is exact in both runs).
    let (framework, _) = libraries(true);
    let py = fixture::pythons().last().unwrap();
    let dir = fixture::tempdir();
    let run = |ms: &str, out: &str| {
        let path = dir.join(out);
        let status = fixture::mlprof()
            .args(["run", "-q", "-o"])
            .arg(&path)
            .arg("--")
            .arg(&py.exe)
            .arg(fixture::script(SCRIPT))
            .arg(framework)
            .env("MLPROF_GPU_LAUNCH_SAMPLE", "1")
            .env("LARGE_MS", ms)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        path
    };
    let (base, new) = (run("20", "base.json"), run("35", "new.json"));
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
    let gpu: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| {
            l["meaningful"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m == "gpu_kernel_s")
        })
        .collect();
    assert_eq!(gpu.len(), 1, "{gpu:?}");
    assert_eq!(gpu[0]["line"], markers(SCRIPT)["large"]);
    let delta = gpu[0]["gpu_kernel_s_delta"].as_f64().unwrap();
    assert!((delta - 0.3).abs() < 1e-6, "{delta}");
    // The terminal table shows the column.
    let out = fixture::mlprof()
        .arg("diff")
        .arg(&base)
        .arg(&new)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("GPU time") && text.contains("+300 ms"),
        "{text}"
    );
}

#[test]
fn a_line_launching_kernels_too_small_to_keep_the_gpu_busy_gets_a_hint() {
    let script = "gpu_small_kernels.py";
    let (framework, _) = libraries(true);
    let (run, _, _) = profiled(script, &[framework], &[]);
    let p = &run.profile;
    let m = markers(script);
    let hinted: Vec<u32> = p
        .hints
        .iter()
        .filter(|h| h.kind.as_str() == "small_kernels")
        .filter_map(|h| h.line)
        .collect();
    assert_eq!(hinted, vec![m["tiny"]], "{:?}", p.hints);
    let hint = p
        .hints
        .iter()
        .find(|h| h.kind.as_str() == "small_kernels")
        .unwrap();
    assert!(
        hint.evidence.contains("4000 kernels averaging 4.0 us"),
        "{}",
        hint.evidence
    );
    // Its GPU time is exact (one line launches that kernel): 16 ms.
    let tiny = at(p, script, "tiny").measures.gpu_calls;
    assert!((tiny.gpu_kernel_s - 0.016).abs() < 1e-6, "{tiny:?}");
}

#[test]
fn each_region_gets_the_gpu_time_of_the_kernels_launched_inside_it() {
    let script = "gpu_kernel_regions.py";
    let (framework, _) = libraries(true);
    let py = fixture::pythons().last().unwrap();
    let python_dir = fixture::root().join("python");
    let run = fixture::profile_args(
        &[],
        &[os(&py.exe), os(&fixture::script(script)), os(framework)],
        &[
            ("PYTHONPATH", python_dir.to_str().unwrap()),
            ("MLPROF_GPU_LAUNCH_SAMPLE", "1"),
        ],
    );
    assert!(run.output.status.success());
    let p = &run.profile;
    let whole = at(p, script, "launch").measures.gpu_calls;
    assert!((whole.gpu_kernel_s - 0.4).abs() < 1e-6, "{whole:?}");
    for (name, seconds) in [("short", 0.1), ("long", 0.3)] {
        let r = p.regions.iter().find(|r| r.name == name).unwrap();
        let g = &r.gpu_calls;
        assert!(
            (g.gpu_kernel_s - seconds).abs() < 1e-6 && g.gpu_kernels == 100,
            "region {name}: {g:?}"
        );
    }
}

#[test]
fn sweep_fits_the_growth_of_each_lines_gpu_time() {
    // One kernel per line, so each line's GPU time is exact whatever the sampling: the
    // exponents are exact too.
    let script = "gpu_kernel_sweep.py";
    let (framework, _) = libraries(true);
    let py = fixture::pythons().last().unwrap();
    let out = fixture::mlprof()
        .args(["sweep", "--param", "N=2,4,8", "--json", "--"])
        .arg(&py.exe)
        .arg(fixture::script(script))
        .arg(framework)
        .arg("{N}")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: mlprof::model::sweep::Sweep = serde_json::from_slice(&out.stdout).unwrap();
    let m = markers(script);
    let line = |name: &str| s.lines.iter().find(|l| l.line == m[name]).unwrap();
    let exact = |k: Option<f64>, want: f64| k.is_some_and(|k| (k - want).abs() < 1e-6);
    assert!(
        exact(line("linear").gpu_time_exponent, 1.0),
        "{:?}",
        line("linear")
    );
    assert!(
        exact(line("square").gpu_time_exponent, 2.0),
        "{:?}",
        line("square")
    );
    let seconds: Vec<f64> = line("square")
        .gpu_kernel_s
        .iter()
        .flatten()
        .copied()
        .collect();
    assert_eq!(seconds.len(), 3);
    assert!((seconds[2] - 0.064).abs() < 1e-9, "{seconds:?}");
    // The text document names the line whose GPU time grows faster than linearly.
    let out = fixture::mlprof()
        .args(["sweep", "--param", "N=2,4,8", "--width", "0", "--"])
        .arg(&py.exe)
        .arg(fixture::script(script))
        .arg(framework)
        .arg("{N}")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("takes GPU time growing as N^2.00"), "{text}");
}
