//! A pool's time on the line whose call it serves (issue 47, item 6): with several Python
//! threads, the BLAS pool's CPU goes to the thread that multiplies, not to the main thread's
//! `join` beside it; spinning on after a product, to that product, not to the pure-Python
//! line that follows.

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
