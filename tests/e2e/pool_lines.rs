//! A pool's time on the line whose call it serves (issue 47, item 6): with several Python
//! threads, the BLAS pool's CPU goes to the thread that multiplies, not to the main thread's
//! `join` beside it; spinning on after a product, to that product, not to the pure-Python
//! line that follows; under `mlprof attach`, where a look finds a thread asleep, the CPU it ran
//! before is not the sleep's.

use crate::cpu::{line, markers};
use crate::fixture;

#[test]
fn a_pool_works_for_the_thread_whose_call_it_serves_never_for_join_or_pure_python() {
    let m = markers("pool_threads.py");
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        let run =
            fixture::profile_script(py, "pool_threads.py", &[], &[("OPENBLAS_NUM_THREADS", "2")]);
        let p = &run.profile;
        // The pool's CPU by the kernel's clock of its threads (those that never ran Python).
        let pool: f64 = p
            .threads
            .iter()
            .filter(|t| !t.python)
            .map(|t| t.cpu_python_s + t.cpu_native_s + t.kernel_s)
            .sum();
        assert!(
            pool > 0.2,
            "{v}: the pool worked {pool:.3} s: {:?}",
            p.threads
        );
        // What one late sample may carry across a line's boundary, a few times over.
        let slack = fixture::straddle(p, 2.0);
        let native = |name: &str| line(p, "pool_threads.py", m[name]).measures.cpu_native_s;
        let products = native("product") + native("short_product");
        assert!(
            products >= 0.8 * pool,
            "{v}: the products hold {products:.3} s native of the pool's {pool:.3} s"
        );
        for (name, what) in [
            ("join", "the main thread's join"),
            ("pure", "the pure-Python thread's line"),
            ("after", "the pure-Python line after each product"),
        ] {
            let got = native(name);
            assert!(
                got <= 0.05 * pool + slack,
                "{v}: {what} holds {got:.3} s native of the pool's {pool:.3} s (slack {slack:.3})"
            );
        }
    }
}

/// Under `mlprof attach` a thread's CPU since the last look is charged where the look finds it.
/// Found asleep after a product, it was charged to the `time.sleep` (with the pool's spinning
/// joined to it): 5.8 of the 8.6 s native on the sleep line, and the "pools spinning" hint.
#[test]
fn under_attach_a_sleep_after_products_holds_none_of_their_cpu() {
    let m = markers("attach_pool_sleep.py");
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        let (mut child, _out) = crate::attach::started_with(
            &py.exe,
            "attach_pool_sleep.py",
            "30",
            &[("OPENBLAS_NUM_THREADS", "2")],
        );
        let p = crate::attach::attached(child.id(), "3");
        let _ = child.kill();
        let _ = child.wait();
        let at = |name: &str| &line(&p, "attach_pool_sleep.py", m[name]).measures;
        let cpu = |name: &str| at(name).cpu_python_s + at(name).cpu_native_s;
        let sampled: f64 = p
            .lines
            .iter()
            .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
            .sum();
        assert!(sampled > 0.3, "{v}: {sampled:.3} s sampled in all");
        // One look's CPU straddling the product's end, per thread (the main thread and the
        // pool's), a few times over.
        let slack = fixture::straddle(&p, 4.0);
        let sleep = cpu("sleep");
        assert!(
            sleep <= 0.05 * sampled + slack,
            "{v}: the sleep holds {sleep:.3} s CPU of {sampled:.3} s sampled (expected none \
             by construction; slack {slack:.3}): {:?}",
            at("sleep")
        );
        let on_sleep: Vec<_> = (p.hints.iter())
            .filter(|h| h.line == Some(m["sleep"]))
            .map(|h| h.kind)
            .collect();
        assert!(
            on_sleep.is_empty(),
            "{v}: hints on the sleep line: {on_sleep:?}"
        );
        let products = at("product").cpu_native_s;
        assert!(
            products >= 0.7 * sampled,
            "{v}: the products hold {products:.3} s native of {sampled:.3} s sampled (the \
             pure-Python loop is about a tenth of the time)"
        );
    }
}
