//! The profiler's own cost is bounded and shown (issue 47): reading `/proc` (each process's
//! footprint, the costly `smaps_rollup` of its shared pages) and looking at waiting threads
//! each keep to a fixed share of one CPU however many processes and threads there are, as
//! the kernel's clock of the collector's thread counts it; the report says what the profiler
//! used beside the program's CPU.

use crate::fixture::{self, os};

/// The shares of one CPU that `/proc` readings (`PSS_SHARE` + `PROC_SHARE` of
/// `src/collect/footprint.rs`) and looks at waiting threads (`WAITS_SHARE` of
/// `src/collect/channels.rs`) may take.
const PROC_SHARES: f64 = 0.005 + 0.0025;
const WAITS_SHARE: f64 = 0.0025;

#[test]
fn reading_proc_and_waiting_threads_keep_to_their_share_of_a_cpu_and_the_report_says_so() {
    let script = fixture::script("own_cost.py");
    let py = fixture::numpy_pythons()
        .first()
        .expect("a Python with numpy");
    let run = fixture::profile(&[os(&py.exe), os(&script)]);
    assert_eq!(
        String::from_utf8_lossy(&run.output.stdout).trim(),
        "children [0, 1, 0, 1, 0, 1, 0, 1]"
    );
    let p = &run.profile;
    assert_eq!(p.processes.len(), 9, "{:?}", p.processes);
    let own = &p.profiler;
    assert!(own.cpu_s > 0.0, "the profiler's CPU is recorded: {own:?}");
    assert!(
        own.proc_reads_s > 0.0 && own.waits_s > 0.0,
        "both kinds of work were done and measured: {own:?}"
    );
    assert!(own.proc_reads_s + own.waits_s <= own.cpu_s, "{own:?}");
    // Each pace: its share of the wall time, its 20 ms burst, one reading past the budget
    // (measured after it is made: at most a few ms here), and the readings that are always
    // made (the command's own process at every tick, each process's first: tens of us each).
    let ticks = p.wall_s / 0.02;
    let proc_bound = PROC_SHARES * p.wall_s + 2.0 * 0.02 + 0.01 + ticks * 100e-6;
    assert!(
        own.proc_reads_s <= proc_bound,
        "{:.3} s reading /proc in {:.1} s, at most {proc_bound:.3} s",
        own.proc_reads_s,
        p.wall_s
    );
    let waits_bound = WAITS_SHARE * p.wall_s + 0.02 + 0.01;
    assert!(
        own.waits_s <= waits_bound,
        "{:.3} s looking at waiting threads in {:.1} s, at most {waits_bound:.3} s",
        own.waits_s,
        p.wall_s
    );
    // The header says it beside the program's CPU.
    let dir = fixture::tempdir();
    let file = dir.join("p.json");
    std::fs::write(&file, serde_json::to_vec(p).expect("profile as JSON")).expect("write");
    let out = fixture::mlprof()
        .args(["report", "--width", "80"])
        .arg(&file)
        .output()
        .expect("mlprof report");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("profiler CPU") && l.contains("of the program's")),
        "{text}"
    );
}
