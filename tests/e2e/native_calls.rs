//! Compiled code is native (issue 30): libc and libm called by an extension or by JIT code
//! are native time, not the interpreter's, and code outside every mapped file is named
//! `<JIT code>`.

use mlprof::model::LineStats;

use crate::cpu::{line, markers};
use crate::fixture::{self, os};
use crate::frameworks::framework_python;

fn cpu(l: &LineStats) -> f64 {
    l.measures.cpu_python_s + l.measures.cpu_native_s
}

#[test]
fn numpys_memcpy_in_a_copy_is_native_time() {
    for py in fixture::numpy_pythons() {
        let script = fixture::script("copy_native.py");
        let run = fixture::profile(&[os(&py.exe), os(&script)]);
        assert!(run.output.status.success());
        let l = line(
            &run.profile,
            "copy_native.py",
            markers("copy_native.py")["copy"],
        );
        // Sampled: on a machine busier than its cores the kernel's user/system split runs high
        // (below), so the line's kernel time counts here too (0.09 s of CPU and 0.30 s of
        // system once, beside 4 busy loops).
        assert!(
            cpu(l) + l.measures.kernel_s > 0.1,
            "{}: {:?}",
            py.minor,
            l.measures
        );
        assert!(
            l.measures.cpu_python_s <= 0.2 * cpu(l),
            "{}: the copy line is at most 20% Python: {:?}",
            py.minor,
            l.measures
        );
        assert!(
            l.measures
                .native
                .iter()
                .any(|n| n.library.starts_with("libc")),
            "{}: libc's copy named under it: {:?}",
            py.minor,
            l.measures.native
        );
        // Its page faults are kernel time, not waiting: the kernel time of the loop, within the sampling
        // error of a few hundred samples (and the kernel time of `del`, a system call). On a
        // machine busier than its cores the kernel's own user/system split is drawn from few
        // ticks and runs high (a pure-Python loop there shows most of its time as system), and
        // the line takes at most 2 ms a fault of it: there the line may hold less, not more.
        let kernel = crate::starvation::printed(&run.output.stderr, "kernel");
        eprintln!(
            "{}: copy line kernel {:.2} s, the loop's kernel time {kernel:.2} s",
            py.minor, l.measures.kernel_s
        );
        assert!(
            l.measures.kernel_s <= 1.35 * kernel + 0.05
                && l.measures.kernel_s >= 0.4 * kernel - 0.05,
            "{}: page faults on the copy line {:.2} s, the loop's kernel time {kernel:.2} s",
            py.minor,
            l.measures.kernel_s
        );
    }
}

#[test]
fn a_numba_loop_calling_pow_is_native_time() {
    let Some(python) = framework_python("numba") else {
        return;
    };
    let script = fixture::script("numba_job.py");
    let run = fixture::profile(&[os(&python), os(&script)]);
    assert!(run.output.status.success());
    let l = line(
        &run.profile,
        "numba_job.py",
        markers("numba_job.py")["call"],
    );
    eprintln!("numba: {:?}", l.measures);
    assert!(
        l.measures.cpu_native_s >= 0.7 * cpu(l) && cpu(l) > 0.3,
        "the numba line is at least 70% native: {:?}",
        l.measures
    );
    let named =
        |f: &dyn Fn(&str, &str) -> bool| l.measures.native.iter().any(|n| f(&n.symbol, &n.library));
    assert!(
        named(&|_, lib| lib.starts_with("libm")),
        "libm named: {:?}",
        l.measures.native
    );
    assert!(
        named(&|sym, _| sym == "<JIT code>"),
        "JIT code named: {:?}",
        l.measures.native
    );
}

#[test]
fn jit_code_is_named_from_the_processs_perf_map() {
    let py = &fixture::pythons()[0];
    let script = fixture::script("perf_map_jit.py");
    let run = fixture::profile(&[os(&py.exe), os(&script)]);
    assert!(run.output.status.success());
    let p = &run.profile;
    for q in &p.processes {
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", q.pid));
    }
    if String::from_utf8_lossy(&run.output.stdout).starts_with("skipped") {
        crate::fixture::skipped("skipped: not x86-64");
        return;
    }
    let l = line(p, "perf_map_jit.py", markers("perf_map_jit.py")["call"]);
    let spin = l
        .measures
        .native
        .iter()
        .find(|n| n.symbol == "mlprof_test_spin")
        .unwrap_or_else(|| panic!("named from the perf map: {:?}", l.measures.native));
    assert_eq!(spin.library, "<JIT code>");
    assert!(
        spin.cpu_s >= 0.8 * cpu(l) && l.measures.cpu_native_s >= 0.9 * cpu(l),
        "the line is the JIT function's: {:?}",
        l.measures
    );
}

#[test]
fn a_child_that_ends_while_the_collector_lags_keeps_its_native_names() {
    let py = &fixture::pythons()[0];
    let script = fixture::script("zombie_child_names.py");
    let run = fixture::profile(&[os(&py.exe), os(&script)]);
    assert!(run.output.status.success());
    let stdout = String::from_utf8_lossy(&run.output.stdout);
    if stdout.starts_with("skipped") {
        crate::fixture::skipped("skipped: not x86-64");
        return;
    }
    assert_eq!(stdout, "child killed True\n");
    let l = line(
        &run.profile,
        "zombie_child_names.py",
        markers("zombie_child_names.py")["memset"],
    );
    let libc: f64 = l
        .measures
        .native
        .iter()
        .filter(|n| n.library.starts_with("libc"))
        .map(|n| n.cpu_s)
        .sum();
    // Before: the maps read from the zombie (empty) replaced those read while it ran, and all
    // its native time became `<JIT code>`.
    assert!(
        l.measures.cpu_native_s >= 0.9 * cpu(l) && libc >= 0.9 * l.measures.cpu_native_s,
        "libc's memset named after the child's end: {:?}",
        l.measures
    );
}
