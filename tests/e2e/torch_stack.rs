//! The PyTorch stack people run (issue 30), when torch is installed in `target/torch-venv`
//! (see bench/README.md; ~5 GB, so CI has none and these say they skipped): a loop starved by
//! its DataLoader shows the waiting on its line, and torch.compile's compile step (the
//! tracing and dozens of g++ processes) is the cost of the line that compiled.

use mlprof::model::{LineStats, Profile};

use crate::cpu::{line, markers};
use crate::fixture::{self, os};

fn torch_python() -> Option<std::path::PathBuf> {
    let python = fixture::root().join("target/torch-venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::fixture::skipped("skipped: no torch in target/torch-venv (see bench/README.md)");
    }
    ok.then_some(python)
}

fn cpu(l: &LineStats) -> f64 {
    l.measures.cpu_python_s + l.measures.cpu_native_s
}

#[test]
fn a_loop_starved_by_its_torch_dataloader_shows_its_waiting() {
    let Some(python) = torch_python() else { return };
    let script = fixture::script("torch_starved.py");
    let run = fixture::profile(&[os(&python), os(&script)]);
    assert!(run.output.status.success());
    let waited = crate::starvation::printed(&run.output.stderr, "waited");
    let l = line(
        &run.profile,
        "torch_starved.py",
        markers("torch_starved.py")["loop"],
    );
    eprintln!(
        "DataLoader: the loop line waited {:.2} s of {waited:.2} s",
        l.measures.waiting_s
    );
    assert!(
        (l.measures.waiting_s - waited).abs() <= 0.25 * waited + 0.1,
        "the loop line waited {:.2} s; the script waited {waited:.2} s",
        l.measures.waiting_s
    );
    assert!(
        l.measures.waiting_for_workers_s >= 0.7 * l.measures.waiting_s,
        "named as waiting for workers: {:?}",
        l.measures
    );
}

/// What a line holds at the peak, summed over lines.
fn held(p: &Profile) -> u64 {
    p.lines.iter().map(|l| l.measures.peak_bytes).sum()
}

#[test]
fn torch_compile_is_the_cost_of_the_line_that_compiled() {
    let Some(python) = torch_python() else { return };
    let script = fixture::script("torch_compile_job.py");
    let run = fixture::profile(&[os(&python), os(&script)]);
    assert!(run.output.status.success());
    let p = &run.profile;
    // The compiler children's CPU, by the kernel's accounting of each process.
    let compilers: f64 = p
        .processes
        .iter()
        .filter(|q| q.python.is_none())
        .map(|q| q.cpu_s)
        .sum();
    let m = markers("torch_compile_job.py");
    let compile = line(p, "torch_compile_job.py", m["compile"]);
    let startup: f64 = p
        .lines
        .iter()
        .filter(|l| l.file == "<interpreter start-up and shutdown>")
        .map(cpu)
        .sum();
    eprintln!(
        "torch.compile: compile line {:.2} s of CPU; compilers {compilers:.2} s; start-up and \
         shutdown {startup:.2} s",
        cpu(compile)
    );
    assert!(compilers > 1.0, "g++ ran: {compilers:.2} s");
    assert!(
        cpu(compile) >= 0.8 * compilers,
        "the compile line holds the compilers' CPU: {:.2} s of {compilers:.2} s",
        cpu(compile)
    );
    // What is left there is the interpreter's own start-up and shutdown (torch's teardown).
    assert!(
        startup <= 0.25 * cpu(compile),
        "not on start-up and shutdown: {startup:.2} s"
    );
    let main = &p.processes[0];
    assert_eq!(main.waiting_for_children_s, 0.0, "not a launcher: {main:?}");
    // Held at the peak: the peak's instant, not every short compiler's own peak (what the
    // lines hold is taken where heap and mapped memory together were highest).
    let peak = p.memory.held_peak_bytes();
    assert!(
        held(p) as f64 <= 1.1 * peak as f64,
        "held {} for a peak of {peak}",
        held(p),
    );
    // The compilers' memory held then is the compile line's, not start-up's.
    let startup_held: u64 = (p.lines.iter())
        .filter(|l| l.file == "<interpreter start-up and shutdown>")
        .map(|l| l.measures.peak_bytes)
        .sum();
    assert!(
        startup_held as f64 <= 0.05 * peak as f64,
        "held on start-up and shutdown: {startup_held} of {peak}"
    );
    // The text report folds the compiler processes: one row per program.
    let file = fixture::tempdir().join("profile.json");
    std::fs::write(&file, serde_json::to_string(p).unwrap()).unwrap();
    let out = fixture::mlprof().arg("report").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rows = text
        .split("\nProcesses")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .map_or(0, |s| s.lines().count().saturating_sub(2));
    assert!(
        rows <= 12 && p.processes.len() > 20,
        "{} processes in {rows} rows:\n{text}",
        p.processes.len()
    );
}
