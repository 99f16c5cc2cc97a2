//! Code compiled from strings (`exec`, dataclasses' generated methods: file `<string>`) is
//! charged to the user line that ran it, never listed as a file of its own; `python -c`'s code
//! is still the program's own `<string>`.

use crate::cpu::{line, markers};
use crate::fixture::{self, os};

const SCRIPT: &str = "generated_code.py";

#[test]
fn generated_code_is_charged_to_the_user_line_that_ran_it() {
    let py = fixture::pythons().last().unwrap();
    let run = fixture::profile_script(py, SCRIPT, &[], &[]);
    let p = &run.profile;
    let truth: serde_json::Value =
        serde_json::from_slice(&run.output.stdout).expect("the phases' CPU, as JSON");
    let marks = markers(SCRIPT);
    // What the samples straddling a phase's ends carry across them: two gaps, or the run's
    // largest sample where timers fire late on a loaded machine.
    let lost = fixture::straddle(p, 2.0);
    for name in ["points", "exec_call"] {
        let m = &line(p, SCRIPT, marks[name]).measures;
        let cpu = m.time_s();
        let want = truth[name].as_f64().unwrap();
        // The loop's own lines and the `while` share the phase; the marked line runs most of it
        // (the generated code it calls): at least 60%, less the straddling samples (without the
        // generated code it gets a call's overhead only).
        assert!(
            cpu >= 0.6 * want - lost && cpu <= want + lost,
            "@{name}: {cpu:.3} s for {want:.3} s of the thread's CPU"
        );
    }
    let listed: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.file.starts_with('<') && l.line > 0)
        .map(|l| format!("{}:{} {:?}", l.file, l.line, l.measures))
        .collect();
    assert!(
        listed.is_empty(),
        "generated code listed as files: {listed:?}"
    );
}

#[test]
fn python_dash_c_code_is_still_the_programs_own() {
    let py = fixture::pythons().last().unwrap();
    let code = "import time\nt = time.thread_time()\nwhile time.thread_time() - t < 0.5:\n    x = sum(range(1000))\n";
    let run = fixture::profile(&[os(&py.exe), os("-c"), os(code)]);
    let p = &run.profile;
    let on_string: f64 = p
        .lines
        .iter()
        .filter(|l| l.file == "<string>")
        .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
        .sum();
    assert!(
        on_string >= 0.5 - fixture::straddle(p, 3.0),
        "{on_string:.3} s on <string> lines of a 0.5 s loop"
    );
}
