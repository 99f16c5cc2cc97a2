//! Every CPython build mlprof reads (the layout list: 3.9 to 3.15 and the free-threaded
//! builds), each run for real: a numpy program's lines, split, threads and memory as its
//! construction says; the layout taken from the interpreter's own `_Py_DebugOffsets` alone
//! (the path a minor newer than any known takes) giving the same report; CPython's JIT code
//! counted as the lines it runs; and a free-threaded build's objects, which never pass through
//! `malloc`, counted in the heap against what tracemalloc saw requested.

use std::path::Path;

use mlprof::model::{LineStats, Profile};

use crate::fixture::{self, os, Python};

const MB: f64 = 1e6;

/// The line of `script` that carries the comment `# LINE: name`.
fn marked(script: &Path, name: &str) -> u32 {
    let text = std::fs::read_to_string(script).expect("script");
    let mark = format!("# LINE: {name}");
    let index = text
        .lines()
        .position(|l| l.trim_end().ends_with(&mark))
        .unwrap_or_else(|| panic!("no {mark} in {}", script.display()));
    index as u32 + 1
}

fn line<'p>(p: &'p Profile, script: &Path, n: u32) -> &'p LineStats {
    let file = script.to_string_lossy();
    p.lines
        .iter()
        .find(|l| l.file == file && l.line == n)
        .unwrap_or_else(|| panic!("line {n} of {file} is not in the profile"))
}

/// `builds.py` under `py` (with `env`), and every figure its construction gives, checked.
fn check_builds_script(py: &Python, env: &[(&str, &str)], layout: &str) -> Profile {
    let script = fixture::script("builds.py");
    let what = format!("{} {env:?}", py.minor);
    let run = fixture::profile_with_env(&[os(&py.exe), os(&script), os("5000000")], env);
    let p = run.profile;
    assert_eq!(p.exit.code, Some(0), "{what}");
    assert!(
        p.warnings.iter().all(|w| !w.contains("Python")),
        "{what}: {:?}",
        p.warnings
    );
    let main = &p.processes[0];
    let version = main.python.as_deref().unwrap_or("");
    assert!(
        version.starts_with(py.minor.trim_end_matches('t'))
            && version.ends_with('t') == py.free_threaded,
        "{what}: python {version}"
    );
    assert_eq!(main.python_layout.as_deref(), Some(layout), "{what}");

    // The loop: pure Python, on two threads at once (the worker's and the main thread's).
    // (OpenBLAS's pool, started by the import, spins on beside it: that is the pool's, told
    // apart as such.)
    let lp = line(&p, &script, marked(&script, "loop"));
    let cpu = lp.measures.cpu_python_s + lp.measures.cpu_native_s - lp.measures.cpu_spin_s;
    assert!(
        lp.measures.cpu_python_s >= 0.8 * cpu && cpu > 0.15,
        "{what}: loop line {:?}",
        lp.measures
    );
    let python_threads = p.threads.iter().filter(|t| t.python).count();
    assert!(python_threads >= 2, "{what}: {:?}", p.threads);
    // Without a GIL the two threads run at once: the loop waits for nothing.
    if py.free_threaded {
        assert!(
            lp.measures.waiting_s <= 0.15 * cpu + fixture::straddle(&p, 2.0),
            "{what}: a free-threaded loop waited {:?}",
            lp.measures
        );
    }

    // The product: BLAS, named under its line.
    let blas = line(&p, &script, marked(&script, "blas"));
    let bcpu = blas.measures.cpu_python_s + blas.measures.cpu_native_s;
    assert!(
        blas.measures.cpu_native_s >= 0.6 * bcpu,
        "{what}: product {:?}",
        blas.measures
    );
    assert!(
        blas.measures
            .native
            .iter()
            .any(|n| n.symbol.contains("gemm")),
        "{what}: {:?}",
        blas.measures.native
    );

    // 60,000 bytes objects of 1,000 bytes held to the end: at the heap peak, within the
    // sampling error of the allocations' 128 KiB mean (about 470 samples: 3 sigma is 14%),
    // and the heap itself holds them (on a free-threaded build too, where mimalloc serves
    // them outside malloc).
    let keep = line(&p, &script, marked(&script, "keep"));
    let held = keep.measures.peak_bytes as f64;
    assert!(
        (0.8 * 60.0 * MB..1.3 * 62.0 * MB).contains(&held),
        "{what}: held {held}"
    );
    assert!(
        p.memory.peak_heap_bytes as f64 >= 60.0 * MB,
        "{what}: heap peak {}",
        p.memory.peak_heap_bytes
    );
    // What lines held at the peak is sampled, the peak exact: the one is the other within
    // the sampling error.
    assert!(
        held <= 1.1 * p.memory.peak_heap_bytes as f64,
        "{what}: held {held} above the peak {}",
        p.memory.peak_heap_bytes
    );

    // The sleep: 0.4 s of waiting on its line.
    let sleep = line(&p, &script, marked(&script, "sleep"));
    assert!(
        sleep.measures.waiting_s >= 0.3,
        "{what}: sleep {:?}",
        sleep.measures
    );
    p
}

#[test]
fn every_build_reads_a_numpy_program_as_its_construction_says() {
    for py in fixture::every_numpy_build() {
        check_builds_script(py, &[], "table");
    }
}

/// With the tables off, every offset `_Py_DebugOffsets` carries is taken from the interpreter
/// and the layout self-checked before any line: the report meets the same truth.
#[test]
fn a_layout_from_the_interpreter_alone_gives_the_same_report() {
    for py in fixture::every_numpy_build() {
        if py.version() < (3, 13) {
            continue; // publishes nothing: the table is all there is
        }
        check_builds_script(py, &[("MLPROF_PYTHON_TABLES", "0")], "interpreter");
    }
}

/// CPython's JIT (3.14+, `PYTHON_JIT=1`) runs a hot loop in code it compiled itself: that time
/// is the loop's Python time, not native code without a name.
#[test]
fn code_cpythons_jit_compiled_is_the_python_time_of_its_lines() {
    let script = fixture::script("jit_loop.py");
    let hot = marked(&script, "hot");
    let mut ran = 0;
    for py in fixture::pythons().iter().filter(|p| p.version() >= (3, 14)) {
        let run = fixture::profile_with_env(
            &[os(&py.exe), os(&script), os("6000000")],
            &[("PYTHON_JIT", "1")],
        );
        let out = String::from_utf8_lossy(&run.output.stdout);
        if !out.contains("jit") || out.contains("no jit") {
            fixture::skipped(&format!(
                "skipped for CPython {}: its JIT is not available",
                py.minor
            ));
            continue;
        }
        ran += 1;
        let p = &run.profile;
        let l = line(p, &script, hot);
        let cpu = l.measures.cpu_python_s + l.measures.cpu_native_s;
        // Native time there would be the interpreter's own C helpers called from the traces
        // at most: a sample or two.
        assert!(
            l.measures.cpu_native_s <= 0.05 * cpu + fixture::straddle(p, 1.0),
            "{}: {:?}",
            py.minor,
            l.measures
        );
        assert!(
            l.measures.native.iter().all(|n| n.library != "<JIT code>"),
            "{}: {:?}",
            py.minor,
            l.measures.native
        );
    }
    if ran == 0 {
        fixture::skipped("skipped: no CPython 3.14+ with a JIT found");
    }
}

/// `kept_bytes.py N 1000` under `py`: what tracemalloc saw requested for the kept objects (a
/// run of its own, without mlprof), and the profile of a run under mlprof.
fn kept_bytes(py: &Python, n: usize, env: &[(&str, &str)]) -> (f64, Profile) {
    let script = fixture::script("kept_bytes.py");
    let n = n.to_string();
    let out = std::process::Command::new(&py.exe)
        .args([os(&script), os(&n), os("1000"), os("measure")])
        .output()
        .expect("run python");
    let requested: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: {:?}", py.minor, out));
    let run = fixture::profile_with_env(&[os(&py.exe), os(&script), os(&n), os("1000")], env);
    (requested, run.profile)
}

/// A free-threaded build's objects come from mimalloc, never through `malloc`: the heap counts
/// them by their blocks (at most a size class above what was requested), the line that made
/// them holds them at the peak, and what it holds is never above the peak. The default builds
/// meet the same truth (those objects are `malloc`'s there).
#[test]
fn kept_python_objects_are_in_the_heap_on_every_build() {
    for py in fixture::every_build() {
        let base = kept_bytes(py, 0, &[]).1.memory.peak_heap_bytes as f64;
        let (requested, p) = kept_bytes(py, 200_000, &[]);
        let what = py.minor.as_str();
        assert!(
            requested > 200.0 * MB,
            "{what}: tracemalloc saw {requested}"
        );
        let peak = p.memory.peak_heap_bytes as f64;
        // mimalloc's size classes are at most 25% apart; malloc adds 8 to 16 bytes a block.
        assert!(
            peak >= requested && peak <= 1.25 * requested + base + 4.0 * MB,
            "{what}: peak {peak} for {requested} requested (base {base})"
        );
        let script = fixture::script("kept_bytes.py");
        let held = line(&p, &script, marked(&script, "keep"))
            .measures
            .peak_bytes as f64;
        // 1,600 samples of 128 KiB: 3 sigma is 7.5%.
        assert!(
            (0.9 * requested..1.1 * requested).contains(&held),
            "{what}: held {held} of {requested}"
        );
        assert!(
            held <= 1.1 * peak,
            "{what}: held {held} above the peak {peak}"
        );
        assert!(p.warnings.iter().all(|w| !w.contains("Python")), "{what}");
    }
    if fixture::free_threaded().is_empty() {
        fixture::skipped("skipped: no free-threaded CPython found");
    }
}

/// Where start-up replaces the allocator mlprof wrapped (`PYTHONMALLOC=debug`), a free-threaded
/// build's heap leaves its objects out: the report says so instead of printing a wrong peak.
#[test]
fn a_free_threaded_heap_that_cannot_count_objects_says_so() {
    for py in fixture::free_threaded() {
        let (requested, p) = kept_bytes(py, 200_000, &[("PYTHONMALLOC", "debug")]);
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("allocator was replaced") && w.contains("leave out Python")),
            "{}: {:?} (heap {} for {requested})",
            py.minor,
            p.warnings,
            p.memory.peak_heap_bytes
        );
    }
    if fixture::free_threaded().is_empty() {
        fixture::skipped("skipped: no free-threaded CPython found");
    }
}
