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

#[test]
fn merge_of_two_rank_profiles_shows_both_ranks_and_their_sum() {
    let script = fixture::script("keep_array.py");
    let kept = crate::cpu::markers("keep_array.py")["kept"];
    let py = fixture::numpy_pythons().last().expect("a Python with numpy");
    let dir = fixture::tempdir();
    let mut paths = Vec::new();
    for (rank, mb) in [("0", "100"), ("1", "200")] {
        let path = dir.join(format!("rank{rank}.json"));
        let status = fixture::mlprof()
            .args(["run", "-q", "-o"])
            .arg(&path)
            .arg("--")
            .arg(&py.exe)
            .arg(&script)
            .arg(mb)
            .env("RANK", rank)
            .env("WORLD_SIZE", "2")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        paths.push(path);
    }
    let all = dir.join("all.json");
    let out = fixture::mlprof()
        .arg("merge")
        .args(&paths)
        .arg("-o")
        .arg(&all)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let merged = fixture::check_profile(&std::fs::read_to_string(&all).unwrap());
    let parts: Vec<_> = paths
        .iter()
        .map(|p| fixture::check_profile(&std::fs::read_to_string(p).unwrap()))
        .collect();
    let names: Vec<_> = merged.ranks.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["rank 0", "rank 1"]);
    assert_eq!(
        merged.memory.peak_heap_bytes,
        parts.iter().map(|p| p.memory.peak_heap_bytes).sum::<u64>(),
        "the merged peak is the sum of the ranks' peaks"
    );
    assert_eq!(merged.ranks[1].peak_heap_bytes, parts[1].memory.peak_heap_bytes);
    assert_eq!(merged.labels.get("world_size").map(String::as_str), Some("2"));
    let line = crate::cpu::line(&merged, "keep_array.py", kept);
    let truth = 300e6;
    assert!(
        fixture::within(line.measures.alloc_bytes as f64, truth, 0.10),
        "the kept line summed over ranks: {} vs {truth}",
        line.measures.alloc_bytes
    );
    assert!(merged
        .processes
        .iter()
        .all(|p| p.rank.as_deref().is_some_and(|r| r.starts_with("rank "))));

    let text = fixture::mlprof().arg("merge").args(&paths).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("Ranks (2, merged)"), "{text}");
    assert!(text.contains("rank 1") && text.contains("\n  sum "), "{text}");

    let bad = fixture::mlprof()
        .arg("merge")
        .arg(&paths[0])
        .arg(dir.join("missing.json"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "one-line error: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}
