//! What native time is: numpy copies made element by element (which never reach `memcpy`) are
//! told apart on their lines, and a thread pool's spinning and barrier waiting is its own part
//! of a line's native time, with a hint, its stacks drawn under the line that waited for it.

use crate::cpu::{line, markers, omp_lib};
use crate::fixture::{self, os};
use mlprof::model::Profile;

/// The text report of `p` at 200 columns.
fn report(p: &Profile) -> String {
    let file = fixture::tempdir().join("profile.json");
    std::fs::write(&file, serde_json::to_string(p).unwrap()).unwrap();
    let out = fixture::mlprof()
        .args(["report", "--width", "200"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn element_wise_copies_are_seen_on_their_lines_and_a_ufunc_is_not_a_copy() {
    const SCRIPT: &str = "element_copies.py";
    let m = markers(SCRIPT);
    let py = fixture::numpy_pythons().last().unwrap();
    // One OpenBLAS thread: its pool's spinning after numpy's import is native time but no
    // copy, and would join the first phase.
    let p = fixture::profile_script(py, SCRIPT, &[], &[("OPENBLAS_NUM_THREADS", "1")]).profile;
    // What a sample straddling a phase's end carries across it (see `straddle`).
    let lost = fixture::straddle(&p, 1.0);
    for name in ["transpose", "astype", "gather"] {
        let l = &line(&p, SCRIPT, m[name]).measures;
        // Each phase is 0.4 s of the thread's CPU; most of a copy's native time is its loop
        // (the rest: the allocation, page faults as system time).
        assert!(
            l.copy_loop_s >= 0.5 * l.cpu_native_s - lost && l.copy_loop_s >= 0.1f64.min(0.4 - lost),
            "@{name}: {:.3} s copying element by element of {:.3} s native: {:?}",
            l.copy_loop_s,
            l.cpu_native_s,
            l.native
        );
    }
    let ufunc = &line(&p, SCRIPT, m["ufunc"]).measures;
    assert!(
        ufunc.cpu_native_s >= 0.1f64.min(0.4 - lost),
        "@ufunc ran: {ufunc:?}"
    );
    assert_eq!(
        ufunc.copy_loop_s, 0.0,
        "a ufunc copies nothing: {:?}",
        ufunc.native
    );

    let text = report(&p);
    assert!(
        text.contains("copied + = also copies element by element"),
        "{text}"
    );
    for name in ["transpose", "astype", "gather"] {
        let row = text
            .lines()
            .find(|r| r.contains(&format!("# @{name}")))
            .unwrap_or_else(|| panic!("no row for @{name}: {text}"));
        assert!(row.contains("B+ "), "@{name} marked: {row}");
    }
    let ufunc_row = text.lines().find(|r| r.contains("# @ufunc")).unwrap();
    assert!(!ufunc_row.contains("B+ "), "{ufunc_row}");
    assert!(
        text.contains("copying element by element in numpy's strided and cast loops"),
        "{text}"
    );
    // The hint: the transpose phase is a quarter of the run.
    assert!(
        p.hints.iter().any(|h| h.kind.as_str() == "element_copies"
            && h.line
                .is_some_and(|n| [m["transpose"], m["astype"], m["gather"]].contains(&n))),
        "{:?}",
        p.hints
    );
    assert!(
        !p.hints
            .iter()
            .any(|h| h.kind.as_str() == "element_copies" && h.line == Some(m["ufunc"])),
        "{:?}",
        p.hints
    );
}

/// `omp_spin.py` under mlprof with `threads` OpenMP threads spinning while they wait.
fn spin_run(threads: &str) -> (Profile, serde_json::Value) {
    let lib = omp_lib();
    let py = fixture::pythons().last().unwrap();
    let script = fixture::script("omp_spin.py");
    let run = fixture::profile_args(
        &[],
        &[os(&py.exe), os(&script), os(&lib)],
        &[("OMP_NUM_THREADS", threads), ("OMP_WAIT_POLICY", "active")],
    );
    let truth = serde_json::from_slice(&run.output.stdout).expect("the team's CPU, as JSON");
    (run.profile, truth)
}

#[test]
fn a_pools_spinning_is_its_own_part_of_the_lines_native_time() {
    let m = markers("omp_spin.py");
    let (p, truth) = spin_run("2");
    let lost = fixture::straddle(&p, 3.0);
    let waited = truth["waited"].as_f64().unwrap();
    let l = line(&p, "omp_spin.py", m["spin"]);
    let spin = l.measures.cpu_spin_s;
    // The team's waiting, by each thread's own CPU clock, is on the line that ran the regions
    // (the pool thread's and the working thread's own at the barrier). Sampling error: a few
    // samples' worth; a pool thread spinning between two calls is not in the truth, so the
    // bound above is looser.
    assert!(
        spin >= 0.7 * waited - lost && spin <= l.measures.cpu_native_s,
        "{spin:.3} s spinning reported for {waited:.3} s waited: {:?}",
        l.measures
    );
    assert!(
        l.measures
            .native
            .iter()
            .any(|n| n.symbol == "<pool spin and barrier wait>"),
        "{:?}",
        l.measures.native
    );
    assert!(
        p.hints
            .iter()
            .any(|h| h.kind.as_str() == "spin" && h.line == Some(m["spin"])),
        "{:?}",
        p.hints
    );
    assert!(report(&p).contains("<pool spin and barrier wait> (libgomp"));

    // The flame graph: the pool thread's stacks stand under the Python stack of the line,
    // below a `<pool thread>` frame, never at the root.
    let frame = |i: &u32| &p.stack_frames[*i as usize];
    let pool_cpu: f64 = p
        .threads
        .iter()
        .filter(|t| !t.python)
        .map(|t| t.cpu_native_s)
        .sum();
    let mut under = 0.0;
    let mut at_root = 0.0;
    for s in &p.stacks {
        let frames: Vec<_> = s.frames.iter().map(frame).collect();
        if frames.first().is_some_and(|f| f.line == 0) {
            at_root += s.cpu_native_s;
        }
        let pool = frames.iter().position(|f| f.function == "<pool thread>");
        if let Some(at) = pool {
            assert!(
                frames[..at]
                    .iter()
                    .any(|f| f.file.ends_with("omp_spin.py") && f.line == m["spin"]),
                "{frames:?}"
            );
            under += s.cpu_native_s;
        }
    }
    assert!(
        under >= 0.9 * pool_cpu - lost,
        "{under:.3} s of the pool's {pool_cpu:.3} s under the line"
    );
    // At the root only what the line table leaves on `<native thread>` (the pool spinning on
    // after the last Python sample).
    let unjoined: f64 = p
        .lines
        .iter()
        .filter(|l| l.file == "<native thread>")
        .map(|l| l.measures.cpu_native_s)
        .sum();
    assert!(
        (at_root - unjoined).abs() <= 1e-6,
        "{at_root:.3} s at the root, {unjoined:.3} s on <native thread>"
    );
}

#[test]
fn work_on_one_thread_is_not_spinning() {
    let m = markers("omp_spin.py");
    let (p, truth) = spin_run("1");
    let lost = fixture::straddle(&p, 3.0);
    let l = line(&p, "omp_spin.py", m["spin"]);
    let worked = truth["worked"].as_f64().unwrap();
    // One thread: no barrier to wait at; its time is the work (libgomp's bookkeeping for a
    // region of one thread is a few samples at most).
    assert!(
        l.measures.cpu_spin_s <= 0.05 * worked + lost,
        "{:.3} s spinning for {worked:.3} s of work: {:?}",
        l.measures.cpu_spin_s,
        l.measures.native
    );
    assert!(
        !p.hints.iter().any(|h| h.kind.as_str() == "spin"),
        "{:?}",
        p.hints
    );
}

#[test]
fn libm_called_by_a_numpy_ufunc_is_native_time() {
    const SCRIPT: &str = "libm_ufunc.py";
    let m = markers(SCRIPT);
    for py in fixture::numpy_pythons() {
        let p = fixture::profile_script(py, SCRIPT, &[], &[]).profile;
        let l = &line(&p, SCRIPT, m["sin"]).measures;
        let cpu = l.cpu_python_s + l.cpu_native_s;
        // The loop between calls is Python: a few percent. Before the stack's doubles were
        // told from addresses, three quarters of the line was "Python".
        assert!(
            l.cpu_native_s >= 0.8 * cpu - fixture::straddle(&p, 2.0)
                && cpu >= 0.6 - fixture::straddle(&p, 1.0).max(0.3),
            "{}: {:.3} s native of {cpu:.3} s: {:?}",
            py.minor,
            l.cpu_native_s,
            l.native
        );
    }
}
