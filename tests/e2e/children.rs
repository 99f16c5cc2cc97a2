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
    let py = fixture::numpy_pythons()
        .last()
        .expect("a Python with numpy");
    let dir = fixture::tempdir();
    let mut paths = Vec::new();
    for (rank, mb) in [("0", "100"), ("1", "200")] {
        let path = dir.join(format!("rank{rank}.json"));
        let env = [("RANK", rank), ("WORLD_SIZE", "2")];
        fixture::run_to(&path, &[os(&py.exe), os(&script), os(mb)], &env);
        paths.push(path);
    }
    let all = dir.join("all.json");
    fixture::merge(&paths, &all);
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
    assert_eq!(
        merged.ranks[1].peak_heap_bytes,
        parts[1].memory.peak_heap_bytes
    );
    assert_eq!(
        merged.labels.get("world_size").map(String::as_str),
        Some("2")
    );
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

    let text = fixture::mlprof()
        .arg("merge")
        .args(&paths)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("Ranks (2, merged)"), "{text}");
    assert!(
        text.contains("rank 1") && text.contains("\n  sum "),
        "{text}"
    );

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

/// A memory cgroup of our own under the one this test runs in, limited to `limit` bytes with
/// no swap, or `None` where cgroups cannot be written (then the address-space limit is used).
fn limited_cgroup(limit: u64) -> Option<std::path::PathBuf> {
    let mine = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (dir, files): (std::path::PathBuf, &[&str]) = if let Some(v1) = mine
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
    {
        let base = format!("/sys/fs/cgroup/memory{v1}");
        (
            base.into(),
            &["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"],
        )
    } else {
        let v2 = mine.lines().find_map(|l| l.strip_prefix("0::"))?;
        (
            format!("/sys/fs/cgroup{v2}").into(),
            &["memory.max", "memory.swap.max"],
        )
    };
    let ours = dir.join(format!("mlprof-oom-{}", std::process::id()));
    std::fs::create_dir(&ours).ok()?;
    let limited = std::fs::write(ours.join(files[0]), limit.to_string()).is_ok();
    let _ = std::fs::write(ours.join(files[1]), limit.to_string());
    if !limited || !ours.join("cgroup.procs").exists() {
        let _ = std::fs::remove_dir(&ours);
        return None;
    }
    Some(ours)
}

#[test]
fn a_run_stopped_by_a_real_memory_limit_still_names_the_line_that_held_the_memory() {
    let script = fixture::script("oom.py");
    let grow = crate::cpu::markers("oom.py")["grow"];
    let py = fixture::numpy_pythons()
        .last()
        .expect("a Python with numpy");
    let limit: u64 = 400 << 20;
    let cgroup = limited_cgroup(limit);
    // The limit applies to the profiled program only: a shell enters the cgroup (or sets the
    // address-space limit) and then execs Python, keeping its pid.
    let (shell, how) = match &cgroup {
        Some(dir) => (
            format!(
                "echo $$ > '{}/cgroup.procs' && exec \"$0\" \"$1\" grow",
                dir.display()
            ),
            "cgroup",
        ),
        None => {
            let probe = std::process::Command::new(&py.exe)
                .arg(&script)
                .arg("probe")
                .output()
                .unwrap();
            let base_kib: u64 = String::from_utf8_lossy(&probe.stdout)
                .trim()
                .parse()
                .unwrap();
            let kib = base_kib + (limit >> 10);
            (
                format!("ulimit -v {kib} && exec \"$0\" \"$1\" grow"),
                "ulimit -v",
            )
        }
    };
    let run = fixture::profile(&[os("sh"), os("-c"), os(&shell), os(&py.exe), os(&script)]);
    if let Some(dir) = &cgroup {
        let _ = std::fs::remove_dir(dir);
    }
    let p = &run.profile;
    match how {
        "cgroup" => {
            assert_eq!(p.exit.signal, Some(9), "{how}: killed: {:?}", p.exit);
            assert_eq!(run.output.status.code(), Some(128 + 9));
            assert!(
                p.warnings
                    .iter()
                    .any(|w| w.contains("likely out of memory")),
                "{:?}",
                p.warnings
            );
        }
        _ => {
            assert_eq!(p.exit.code, Some(1), "{how}: MemoryError: {:?}", p.exit);
            assert!(String::from_utf8_lossy(&run.output.stderr).contains("MemoryError"));
        }
    }
    // The heap reached most of the limit (the rest is the interpreter's own RSS and numpy's
    // code), and the growing line is the top holder at the peak.
    let peak = p.memory.peak_heap_bytes;
    assert!(
        peak > limit / 2 && peak < limit + (100 << 20),
        "{how}: peak heap {peak} under a {limit} limit"
    );
    let top = p
        .lines
        .iter()
        .max_by_key(|l| l.measures.peak_bytes)
        .unwrap();
    assert!(
        top.file.ends_with("oom.py") && top.line == grow,
        "{how}: top holder {}:{}",
        top.file,
        top.line
    );
    assert!(
        top.measures.peak_bytes as f64 > 0.8 * peak as f64 - 60e6,
        "{how}: the line held most of the peak: {} of {peak}",
        top.measures.peak_bytes
    );
    assert!(
        !p.memory.timeline.is_empty(),
        "the timeline up to the death"
    );
}

#[test]
fn children_that_outlive_the_command_are_waited_for_then_left_running() {
    use std::time::{Duration, Instant};
    let script = fixture::script("orphan.py");
    let alloc = crate::cpu::markers("orphan.py")["orphan-alloc"];
    let py = fixture::numpy_pythons()
        .last()
        .expect("a Python with numpy");
    let wait_for = |path: &std::path::Path| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !path.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(path.exists(), "{} never appeared", path.display());
    };

    // An orphan that ends within the wait: mlprof waits and has all of it.
    let out = fixture::tempdir();
    let run = fixture::profile(&[os(&py.exe), os(&script), os("parent"), os("1"), os(&out)]);
    assert_eq!(run.output.stdout, b"parent done\n");
    assert!(
        out.join("done").exists(),
        "collected until the orphan ended"
    );
    let timers = std::fs::read_to_string(out.join("timers")).unwrap();
    assert!(
        timers != "0",
        "sampled while mlprof collected: {timers} timers"
    );
    let orphan = run
        .profile
        .processes
        .iter()
        .find(|p| p.command.iter().any(|a| a == "child") && p.python.is_some())
        .unwrap_or_else(|| panic!("the orphan: {:?}", run.profile.processes));
    assert_eq!(orphan.exit.code, Some(0));
    assert!(!orphan.still_running);
    assert!(orphan.peak_heap_bytes > 50_000_000);
    let line = crate::cpu::line(&run.profile, "orphan.py", alloc);
    assert!(fixture::within(
        line.measures.alloc_bytes as f64,
        50e6,
        0.25
    ));

    // An orphan that outlives the wait: reported as still running, left running, and the
    // program it runs after mlprof ended starts cleanly (no loader error on its stderr).
    let out = fixture::tempdir();
    let run = fixture::profile_args(
        &["--wait-children", "0.3"],
        &[os(&py.exe), os(&script), os("parent"), os("3"), os(&out)],
        &[],
    );
    assert!(
        !out.join("done").exists(),
        "mlprof did not wait for the end"
    );
    let orphan = run
        .profile
        .processes
        .iter()
        .find(|p| p.command.iter().any(|a| a == "child") && p.python.is_some())
        .expect("the orphan, as far as it got");
    assert!(orphan.still_running, "{orphan:?}");
    assert!(
        run.profile
            .warnings
            .iter()
            .any(|w| w.contains("still running") && w.contains(&orphan.pid.to_string())),
        "{:?}",
        run.profile.warnings
    );
    wait_for(&out.join("done"));
    let stderr = std::fs::read_to_string(out.join("stderr")).unwrap();
    assert_eq!(stderr, "", "the orphan's programs start cleanly");
    let timers = std::fs::read_to_string(out.join("timers")).unwrap();
    assert_eq!(
        timers, "0",
        "it stopped sampling once mlprof had stopped reading it"
    );
}

#[test]
fn a_target_that_execs_another_program_keeps_what_it_did_before() {
    let script = fixture::script("exec_self.py");
    let before = crate::cpu::markers("exec_self.py")["before-exec"];
    let py = fixture::numpy_pythons()
        .last()
        .expect("a Python with numpy");
    let run = fixture::profile(&[os(&py.exe), os(&script)]);
    assert_eq!(run.output.stdout, b"after-exec\n");
    assert_eq!(
        run.output.status.code(),
        Some(4),
        "the new program's status"
    );
    let p = &run.profile;
    assert_eq!(p.exit.code, Some(4));
    assert_eq!(p.processes.len(), 1, "one pid: {:?}", p.processes);
    assert_eq!(
        p.processes[0].command.first().map(String::as_str),
        Some("sh")
    );
    assert!(
        p.processes[0].peak_heap_bytes >= 30_000_000,
        "the Python image's peak"
    );
    let line = crate::cpu::line(p, "exec_self.py", before);
    assert!(fixture::within(
        line.measures.alloc_bytes as f64,
        30e6,
        0.25
    ));
}

#[test]
fn a_signal_to_mlprof_while_it_waits_for_orphans_ends_the_wait() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let script = fixture::script("orphan.py");
    let py = fixture::numpy_pythons()
        .last()
        .expect("a Python with numpy");
    let out = fixture::tempdir();
    let profile = out.join("p.json");
    let mut mlprof = fixture::mlprof()
        .args(["run", "--wait-children", "600", "-o"])
        .arg(&profile)
        .arg("--")
        .arg(&py.exe)
        .arg(&script)
        .args(["parent", "8"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(mlprof.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "parent done\n");
    std::thread::sleep(Duration::from_millis(500)); // the command has ended; mlprof waits
                                                    // SAFETY: kill on the pid of a child we spawned and have not reaped.
    unsafe { libc::kill(mlprof.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = mlprof.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "mlprof kept waiting after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "the command's own status");
    let p = fixture::check_profile(&std::fs::read_to_string(&profile).unwrap());
    assert!(
        p.processes.iter().any(|q| q.still_running),
        "{:?}",
        p.processes
    );
    assert!(!out.join("done").exists(), "the orphan was left running");
}

#[test]
fn fork_and_spawn_children_waiting_is_measured_like_the_parents() {
    let script = fixture::script("sleeping_children.py");
    let m = crate::cpu::markers("sleeping_children.py");
    for py in fixture::pythons() {
        for method in ["fork", "spawn"] {
            let v = format!("{} {method}", py.minor);
            let run = fixture::profile(&[os(&py.exe), os(&script), os(method)]);
            assert!(run.output.status.success(), "{v}");
            let p = &run.profile;
            // Per process: waiting in stacks whose innermost frame is the sleep line.
            let mut by_pid: std::collections::BTreeMap<u32, f64> = Default::default();
            for stack in &p.stacks {
                let leaf = stack.frames.last().map(|&f| &p.stack_frames[f as usize]);
                if leaf.is_some_and(|f| {
                    f.file.ends_with("sleeping_children.py") && f.line == m["child-sleep"]
                }) {
                    *by_pid.entry(stack.pid).or_default() += stack.waiting_s;
                }
            }
            assert!(
                by_pid.len() == 2 && by_pid.values().all(|&s| s >= 1.0),
                "{v}: waiting on the sleep line per child: {by_pid:?}"
            );
            let sleep = crate::cpu::line(p, "sleeping_children.py", m["child-sleep"]);
            assert!(
                sleep.measures.waiting_s >= 2.0,
                "{v}: the children's sleep line has {:?}",
                sleep.measures
            );
        }
    }
}

#[test]
fn a_fork_tree_counts_each_workers_own_memory_once() {
    const MIB: f64 = 1048576.0;
    let script = fixture::script("fork_tree.py");
    for py in fixture::pythons() {
        let v = &py.minor;
        let run = fixture::profile(&[os(&py.exe), os(&script)]);
        assert!(run.output.status.success(), "{v}");
        let p = &run.profile;
        let tree = p.memory.peak_heap_bytes as f64 / MIB;
        assert!(
            (425.0..=575.0).contains(&tree),
            "{v}: tree peak {tree:.0} MiB, truth about 500"
        );
        // Resident memory too: fork copies the page tables, so each worker's RSS holds the
        // 300 MiB it shares with the parent (the sum of RSS was about 1.7 GiB); each process
        // counts at its share of own pages (PSS).
        let rss = p.memory.peak_rss_bytes as f64 / MIB;
        assert!(
            (450.0..=800.0).contains(&rss),
            "{v}: tree peak RSS {rss:.0} MiB, truth about 500 plus the interpreters"
        );
        let workers: Vec<_> = p.processes.iter().filter(|w| w.forked).collect();
        assert!(workers.len() >= 4, "{v}: {} fork workers", workers.len());
        for w in workers {
            let inherited = w.inherited_heap_bytes as f64 / MIB;
            let own = (w.peak_heap_bytes - w.inherited_heap_bytes) as f64 / MIB;
            assert!(
                inherited >= 300.0,
                "{v}: worker {} inherited {inherited:.0} MiB",
                w.pid
            );
            assert!(
                (0.0..=60.0).contains(&own),
                "{v}: worker {} added {own:.0} MiB of its own",
                w.pid
            );
        }
    }
}

#[test]
fn cpu_of_children_reaped_outside_the_command_is_the_trees() {
    let py = &fixture::pythons()[0];
    let script = fixture::script("unreaped.py");
    let run = fixture::profile(&[fixture::os(&py.exe), fixture::os(&script)]);
    assert!(run.output.status.success());
    let p = &run.profile;
    let rows: f64 = p.processes.iter().map(|q| q.cpu_s).sum();
    assert!(
        p.cpu_s() >= 0.9 && p.cpu_unreaped_s >= 0.8,
        "the header's CPU holds the worker's 1.0 s: {:.2} s ({:.2} s unreaped), rows {rows:.2} s",
        p.cpu_s(),
        p.cpu_unreaped_s
    );
    assert!(
        p.cpu_s() + 1e-9 >= rows,
        "never below the rows: {} < {rows}",
        p.cpu_s()
    );
}

/// A launcher chain (a pyenv shim: a shell running `readlink`, `dirname` and a nested shell
/// before it execs Python) is one row of the text report, not one per helper; the JSON keeps
/// every process.
#[test]
fn a_launcher_chain_is_one_row_of_the_text_report() {
    let py = fixture::pythons().last().unwrap();
    let dir = fixture::tempdir();
    let out = dir.join("p.json");
    fixture::run_to(
        &out,
        &[
            os("sh"),
            fixture::script("launcher_shim.sh").as_os_str(),
            py.exe.as_os_str(),
            os("-c"),
            os("print('launched')"),
        ],
        &[],
    );
    let profile: mlprof::model::profile::Profile =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // 6 readlink, 6 dirname and the nested shell (which may run `true` itself).
    assert!(
        profile.processes.len() >= 14,
        "{:?}",
        profile.processes.len()
    );
    let text = fixture::mlprof()
        .args(["report", "--width", "0"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(text.status.success(), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    let launcher: Vec<&str> = text.lines().filter(|l| l.contains("(launcher: ")).collect();
    assert_eq!(launcher.len(), 1, "{text}");
    let n: usize = launcher[0]
        .split("(launcher: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(n, profile.processes.len() - 1, "{text}");
    assert!(
        launcher[0].contains("readlink x6") && launcher[0].contains("dirname x6"),
        "{text}"
    );
    // No helper has a row of its own; the Python process does.
    let processes = text.split("Processes (").nth(1).unwrap();
    assert!(
        !processes
            .lines()
            .filter(|l| !l.contains("(launcher: "))
            .any(|l| l.contains(" readlink ") || l.contains(" dirname ")),
        "{text}"
    );
    assert!(processes.contains("print('launched')"), "{text}");
}

#[test]
fn a_spawned_workers_bootstrap_is_never_a_line_and_its_work_is_on_the_target() {
    let script = fixture::script("spawn_bootstrap.py");
    let m = crate::cpu::markers("spawn_bootstrap.py");
    for py in fixture::spread(fixture::pythons()) {
        let v = &py.minor;
        let run = fixture::profile(&[os(&py.exe), os(&script)]);
        assert_eq!(run.output.stdout, b"True\n", "{v}");
        let p = &run.profile;
        let bootstrap: Vec<_> = p.lines.iter().filter(|l| l.file == "<string>").collect();
        assert!(
            bootstrap.is_empty(),
            "{v}: multiprocessing's -c is a line of the report: {bootstrap:?}"
        );
        assert!(
            p.functions.iter().all(|f| f.file != "<string>"),
            "{v}: and a function"
        );
        // The loop is two lines, and its time mostly the kernel's `thread_time` calls: on a
        // loaded machine every sample may come as a call returns, on the `while` line, so the
        // work is asked of `work`'s lines together.
        let work: f64 = p
            .lines
            .iter()
            .filter(|l| l.file.ends_with("spawn_bootstrap.py") && l.function == "work")
            .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
            .sum();
        assert!(
            work > 0.0 && m["work"] > 0,
            "{v}: the workers' work is on `work`'s lines: {:?}",
            p.lines
        );
    }
}
