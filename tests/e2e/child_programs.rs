//! A child program without Python (a compiler a Python line runs, as torch.compile's g++)
//! is the cost of the line that ran it: its memory at the tree's peak, as its CPU already is.

use crate::cpu::{line, markers};
use crate::fixture::{self, os};

/// tests/native/hold_memory.c built into a fresh directory.
fn hold_memory() -> std::path::PathBuf {
    let exe = fixture::tempdir().join("hold_memory");
    let cc = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(fixture::root().join("tests/native/hold_memory.c"))
        .status()
        .expect("cc is needed to build the test program");
    assert!(cc.success(), "cc failed");
    exe
}

#[test]
fn a_child_without_python_holds_its_memory_on_the_line_that_ran_it() {
    const MIB: f64 = 1048576.0;
    let exe = hold_memory();
    let script = fixture::script("native_child.py");
    let m = markers("native_child.py");
    for py in fixture::pythons() {
        let v = &py.minor;
        let run = fixture::profile(&[os(&py.exe), os(&script), os(&exe)]);
        assert!(run.output.status.success(), "{v}");
        let p = &run.profile;
        let child = line(p, "native_child.py", m["child"]);
        let held = child.measures.peak_bytes as f64 / MIB;
        // The child's malloc of 200 MiB is one sampled block: sampled exactly.
        assert!(
            (190.0..=215.0).contains(&held),
            "{v}: the @child line holds {held:.1} MiB at the peak, truth 200 MiB (the child \
             program's malloc, held then); lines: {:?}",
            p.lines
                .iter()
                .map(|l| (&l.file, l.line, l.measures.peak_bytes >> 20))
                .filter(|l| l.2 > 0)
                .collect::<Vec<_>>()
        );
        let startup: u64 = (p.lines.iter())
            .filter(|l| l.file.starts_with('<'))
            .map(|l| l.measures.peak_bytes)
            .sum();
        assert!(
            (startup as f64 / MIB) < 20.0,
            "{v}: {:.1} MiB held at the peak on pseudo-lines (the child's belongs to @child)",
            startup as f64 / MIB
        );
    }
}
