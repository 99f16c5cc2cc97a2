//! Waiting is its own figure, apart from the kernel's CPU time: an idle event loop is waiting,
//! page faults are kernel time, in the JSON (`waiting_s`, `kernel_s`), the text report's
//! columns and legend and the HTML page; profiles that still say `cpu_system_s` read as before.

use crate::cpu::{line, markers};
use crate::fixture::{self, os};

#[test]
fn an_idle_event_loop_is_waiting_and_page_faults_are_kernel_time() {
    let m = markers("waiting_kinds.py");
    let script = fixture::script("waiting_kinds.py");
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        let run = fixture::profile(&[os(&py.exe), os(&script)]);
        assert!(run.output.status.success(), "{v}");
        let p = &run.profile;
        let straddle = fixture::straddle(p, 2.0);
        // The loop sleeps 1 s in epoll: waiting, almost no CPU, none of it the kernel's faults.
        let idle = line(p, "waiting_kinds.py", m["idle_loop"]);
        let im = &idle.measures;
        assert!(
            im.waiting_s >= 0.8 && im.kernel_s <= 0.02 + straddle,
            "{v}: the idle loop {im:?}"
        );
        assert!(
            im.cpu_python_s + im.cpu_native_s <= 0.25 * im.waiting_s + straddle,
            "{v}: the idle loop used CPU {im:?}"
        );
        // 12 arrays of 128 MiB filled: 1.5 GiB of fresh pages, the kernel's time on them at
        // most what it charged the process, and nothing waited.
        let faults = line(p, "waiting_kinds.py", m["faults"]);
        let fm = &faults.measures;
        assert!(
            fm.kernel_s >= 0.02 && fm.kernel_s <= p.cpu_kernel_s + straddle,
            "{v}: the filling line {fm:?}, the process's kernel time {:.3} s",
            p.cpu_kernel_s
        );
        assert!(
            fm.waiting_s <= 0.1 * fm.time_s() + straddle,
            "{v}: the filling line waited {fm:?}"
        );
        let threads_kernel: f64 = p.threads.iter().map(|t| t.kernel_s).sum();
        let lines_kernel: f64 = p.lines.iter().map(|l| l.measures.kernel_s).sum();
        assert!(
            (threads_kernel - lines_kernel).abs() <= 1e-6 * threads_kernel.max(1.0),
            "{v}: kernel time on lines {lines_kernel} against threads {threads_kernel}"
        );
    }
}

#[test]
fn the_reports_name_waiting_and_kernel_time_and_old_profiles_still_read() {
    let py = &fixture::numpy_pythons()[0];
    let script = fixture::script("waiting_kinds.py");
    let dir = fixture::tempdir();
    let json = dir.join("p.json");
    fixture::run_to(&json, &[os(&py.exe), os(&script)], &[]);
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(
        text.contains("\"waiting_s\"")
            && text.contains("\"kernel_s\"")
            && !text.contains("system_s"),
        "the JSON names waiting_s and kernel_s"
    );
    let report = |path: &std::path::Path, args: &[&str]| fixture::read_with("report", path, args);
    let shown = report(&json, &["--width", "0"]);
    let header = shown
        .lines()
        .find(|l| l.trim_start().starts_with("line Python native"))
        .expect(&shown);
    assert!(
        header.contains(" kernel ") && header.contains(" waiting "),
        "{header}"
    );
    assert!(
        shown.contains("waiting: off CPU (sleep, I/O, locks, the GIL, workers)")
            && shown.contains("kernel: page faults"),
        "the legend says what each column is:\n{shown}"
    );
    let html = report(&json, &["--html"]);
    assert!(html.contains("waiting (off CPU") && html.contains("kernel (page faults)"));
    // A profile of before the split: its waiting read from `cpu_system_s` (the timeline's from
    // `system_s`; a rank's line always said `waiting_s`), and no kernel time.
    let old = dir.join("old.json");
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    as_before_the_split(&mut value);
    std::fs::write(&old, value.to_string()).unwrap();
    let new: mlprof::model::Profile = serde_json::from_str(&text).unwrap();
    let back: mlprof::model::Profile = serde_json::from_str(&report(&old, &["--json"])).unwrap();
    let waited =
        |p: &mlprof::model::Profile| p.lines.iter().map(|l| l.measures.waiting_s).sum::<f64>();
    assert!(waited(&new) > 0.8 && (waited(&back) - waited(&new)).abs() < 1e-9);
    assert!(back.lines.iter().all(|l| l.measures.kernel_s == 0.0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `v` as profiles wrote it before `kernel_s`: no `kernel_s`, and `waiting_s` named
/// `cpu_system_s` where CPU is split (`system_s` in the timeline's buckets).
fn as_before_the_split(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.remove("kernel_s");
            let old = if map.contains_key("python_s") {
                Some("system_s")
            } else if map.contains_key("cpu_python_s") || map.contains_key("cpu_python_s_delta") {
                Some("cpu_system_s")
            } else {
                None
            };
            for (new, old) in [
                ("waiting_s", old),
                ("waiting_s_delta", Some("cpu_system_s_delta")),
            ] {
                if let (Some(old), Some(x)) = (old, map.remove(new)) {
                    map.insert(old.to_string(), x);
                }
            }
            map.values_mut().for_each(as_before_the_split);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(as_before_the_split),
        _ => {}
    }
}
