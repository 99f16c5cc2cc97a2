//! Process trees (issue 6): children run through subprocess and fork children are profiled by
//! default and left alone with `--no-follow`, without changing what the program does.

use crate::fixture::{self, os};

#[test]
fn children_are_followed_by_default_and_not_with_no_follow() {
    let script = fixture::script("children.py");
    for py in fixture::pythons() {
        let v = &py.minor;
        let run = fixture::profile(&[os(&py.exe), os(&script)]);
        assert_eq!(run.output.stdout, b"child-says-hi\nparent done\n", "{v}");
        let procs = &run.profile.processes;
        let sh = procs
            .iter()
            .find(|p| p.command.first().is_some_and(|c| c == "sh"));
        let sh = sh.unwrap_or_else(|| panic!("{v}: the sh child is in the tree: {procs:?}"));
        assert_eq!(sh.exit.code, Some(0), "{v}");
        let forked = procs.iter().find(|p| p.forked).expect("the fork child");
        assert!(
            forked.peak_heap_bytes - forked.inherited_heap_bytes >= 20_000_000,
            "{v}: {forked:?}"
        );

        let alone = fixture::profile_args(&["--no-follow"], &[os(&py.exe), os(&script)], &[]);
        assert_eq!(
            alone.output.stdout, b"child-says-hi\nparent done\n",
            "{v}: same behaviour"
        );
        assert_eq!(
            alone.profile.processes.len(),
            1,
            "{v}: only the launched process: {:?}",
            alone.profile.processes
        );
        assert!(alone.profile.processes[0].python.is_some());
    }
}

#[test]
fn thirty_two_forked_children_of_eight_threads_each_complete_and_are_all_seen() {
    use std::time::{Duration, Instant};
    let script = fixture::script("fork_storm.py");
    let py = fixture::pythons().last().unwrap();
    let dir = fixture::tempdir();
    let out = dir.join("p.json");
    let mut child = fixture::mlprof()
        .args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&py.exe)
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{}: the fork storm hung", py.minor);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success());
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert_eq!(stdout, "children 32 failed 0\n");
    let p = fixture::check_profile(&std::fs::read_to_string(&out).unwrap());
    let forked: Vec<_> = p.processes.iter().filter(|c| c.forked).collect();
    assert_eq!(forked.len(), 32, "{}: every child seen", py.minor);
    assert!(forked.iter().all(|c| c.exit.code == Some(0)), "{forked:?}");
    assert!(
        forked.iter().all(|c| c.alloc_count > 1000),
        "each child's allocations counted"
    );
    assert_eq!(p.dropped_events, 0, "no records lost");
}
