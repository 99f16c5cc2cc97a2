//! Deep stacks keep the program's line (issue 47, item 4): an import 30 modules deep (about
//! 180 Python frames, more than the 128 a sample keeps) charges its CPU, its wait and the
//! memory it keeps to the program's `import` line, not to `<outside profiled code>`.

use crate::cpu::{line, markers};
use crate::fixture;

#[test]
fn an_import_thirty_modules_deep_is_charged_to_the_import_line() {
    let m = markers("deep_import.py");
    for py in fixture::spread(fixture::pythons()) {
        let v = &py.minor;
        let run = fixture::profile_script(py, "deep_import.py", &[], &[]);
        assert_eq!(run.output.stdout, b"deep 33554432\n", "{v}");
        let p = &run.profile;
        let slack = fixture::straddle(p, 2.0);
        let import = &line(p, "deep_import.py", m["import"]).measures;
        // 0.4 s of CPU by the thread's own clock, a 0.3 s sleep, 32 MiB kept (one block,
        // always sampled, at its size).
        assert!(
            import.cpu_python_s + import.cpu_native_s + import.kernel_s >= 0.4 - slack,
            "{v}: the import line's CPU {import:?}"
        );
        assert!(import.waiting_s >= 0.25, "{v}: its wait {import:?}");
        assert!(
            (31 << 20..=33 << 20).contains(&import.peak_bytes),
            "{v}: held at the peak {} of 32 MiB",
            import.peak_bytes
        );
        let outside: f64 = p
            .lines
            .iter()
            .filter(|l| l.file == "<outside profiled code>")
            .map(|l| l.measures.time_s())
            .sum();
        assert!(
            outside <= 0.1 + slack,
            "{v}: {outside:.3} s outside the program's code"
        );
    }
}
