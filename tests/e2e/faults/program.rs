//! Fault suite, the profiled program's side: what real programs do to themselves (threads that
//! end by `pthread_exit` or cancellation, very long waits, waits given timeouts the kernel
//! refuses, `errno` after successful calls,
//! failing subprocesses, fork children without a channel, `os._exit`, a full, read-only or
//! unsafe TMPDIR, a full ring while new functions first run) must not change the program's
//! behaviour, and the report must still be right.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use super::{os, profiled, same_behaviour, script, Profiled};
use crate::fixture::{self, pythons};

fn each_python(name: &str, args: &[&str], check: impl Fn(&fixture::Python, &Profiled)) {
    let path = script(name);
    for py in pythons() {
        let mut argv: Vec<&OsStr> = vec![os(&py.exe), os(&path)];
        argv.extend(args.iter().map(os));
        let run = same_behaviour(&argv, &[]); // mlprof killed, and the test failed, past LIMIT
        check(py, &run);
    }
}

#[test]
fn daemon_threads_still_running_at_exit_do_not_abort_the_program() {
    // CPython ends them with pthread_exit during finalization: a forced unwind.
    each_python("threads_exit.py", &["daemon"], |py, run| {
        assert_eq!(run.output.status.code(), Some(7), "{}", py.minor);
        assert_eq!(run.profile().exit.code, Some(7));
    });
}

#[test]
fn threads_that_call_pthread_exit_or_are_cancelled_do_not_abort_the_program() {
    for mode in ["exit", "cancel"] {
        each_python("threads_exit.py", &[mode], |py, run| {
            assert_eq!(run.output.status.code(), Some(7), "{mode} {}", py.minor);
            run.profile();
        });
    }
}

#[test]
fn ppoll_and_pselect_with_a_timeout_of_long_max_seconds_wait_as_asked() {
    each_python("waits.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert_eq!(
            out.matches("returned 1 after the write").count(),
            2,
            "{}: {out}",
            py.minor
        );
    });
}

#[test]
fn waits_given_timeouts_the_kernel_refuses_fail_at_once_as_without_mlprof() {
    // ppoll and pselect with {-1,0}, {0,-1}, {0,2e9} or {0,LONG_MAX}: EINVAL at once, not 0 or
    // a wait of 2 s or forever; the sleeps and select likewise; negative poll and epoll_pwait
    // timeouts still wait forever. same_behaviour compares return values, errno and timing.
    each_python("bad_timeouts.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert_eq!(
            out.matches("-> -1 errno EINVAL fast").count(),
            17,
            "{}: {out}",
            py.minor
        );
    });
}

#[test]
fn the_programs_alternate_signal_stack_is_never_overrun() {
    // faulthandler (enabled by pytest) gives each thread a 10 KB alternate stack in the heap;
    // a sampler running there wrote below it into the program's heap (crashes in pytest).
    each_python("altstack.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert!(
            out.contains("canary bytes touched: 0"),
            "{}: {out}",
            py.minor
        );
        // Sampled all along: `deep` burns 1.5 s of CPU (its thread's clock), all of it on its
        // loop's lines. The count of samples is not compared with the rate's 150: on a busy machine
        // the kernel fires a CPU timer only at a tick that finds the thread running (a few
        // dozen times in 1.5 s at load 6 on 2 cores); each sample weighs what the thread used.
        let p = run.profile();
        let m = crate::cpu::markers("faults/altstack.py");
        let deep: f64 = p
            .lines
            .iter()
            .filter(|l| {
                l.file.ends_with("altstack.py") && (m["loop"]..=m["work"]).contains(&l.line)
            })
            .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
            .sum();
        // Less what the sample straddling the loop's end carries on (see `straddle`).
        let lost = crate::fixture::straddle(&p, 1.0).max(0.15);
        assert!(
            deep >= 1.5 - lost && p.cpu_samples >= 5,
            "{}: {deep:.2} s of 1.5 s on the lines of `deep`'s loop, {} samples",
            py.minor,
            p.cpu_samples
        );
    });
}

#[test]
fn errno_is_unchanged_by_sampled_allocations() {
    each_python("errno_kept.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert!(!out.contains("errno 34"), "{}: {out}", py.minor);
        assert_eq!(out.matches("errno 0").count(), 6, "{}: {out}", py.minor);
    });
}

#[test]
fn a_failed_subprocess_does_not_end_its_parent_in_the_report() {
    // CPython's vfork child calls _exit(255) when exec fails, in the parent's memory.
    each_python("subprocess_exit.py", &[], |py, run| {
        assert_eq!(run.output.status.code(), Some(4));
        let p = run.profile();
        let held = p
            .memory
            .timeline
            .iter()
            .map(|s| s.heap_bytes)
            .max()
            .unwrap_or(0);
        assert!(
            held >= 140_000_000,
            "{}: the parent's 150 MB vanished from the timeline (max {held})",
            py.minor
        );
        assert_eq!(p.processes[0].exit.code, Some(4), "{}", py.minor);
    });
}

#[test]
fn a_fork_child_without_a_channel_writes_nothing_into_its_parents() {
    each_python("fork_nochannel.py", &[], |py, run| {
        assert!(String::from_utf8_lossy(&run.output.stdout).contains("child exited 5"));
        let p = run.profile();
        let parent = &p.processes[0];
        assert!(
            parent.peak_heap_bytes < 100_000_000,
            "{}: the child's 200 MB counted in the parent ({} bytes)",
            py.minor,
            parent.peak_heap_bytes
        );
        assert_eq!(parent.exit.code, Some(0), "{}", py.minor);
    });
}

#[test]
fn os_exit_while_threads_allocate_keeps_status_and_output() {
    each_python("os_exit.py", &[], |py, run| {
        assert_eq!(run.output.status.code(), Some(9), "{}", py.minor);
        assert_eq!(run.profile().exit.code, Some(9));
    });
}

#[test]
fn functions_first_run_while_the_ring_is_full_are_still_named() {
    let path = script("code_overflow.py");
    for py in pythons() {
        let args = [os(&py.exe), os(&path)];
        let expected = super::plain(&args, &[]);
        let run = profiled(&["--memory-sample-bytes", "512"], &args, &[]);
        super::assert_same(&expected, &run.output, &args);
        let p = run.profile();
        assert!(p.dropped_events > 0, "{}: the ring never filled", py.minor);
        let missing: Vec<String> = (0..20)
            .map(|i| format!("first_run_{i:02}"))
            .filter(|name| !p.functions.iter().any(|f| f.function.ends_with(name)))
            .collect();
        assert!(missing.is_empty(), "{}: not named: {missing:?}", py.minor);
    }
}

/// Run `mlprof run` and the plain program in a private mount namespace whose TMPDIR is a fresh
/// tmpfs (`options` as for mount). `None` where this machine cannot (not root, no unshare).
fn in_tmpfs(options: &str, args: &[&OsStr]) -> Option<(std::process::Output, Profiled)> {
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        crate::fixture::skipped("skipped: cannot mount a tmpfs in a private mount namespace here");
        return None;
    }
    let mnt = fixture::tempdir();
    let out_dir = fixture::tempdir();
    let out = out_dir.join("profile.json");
    let wrap = |profile: bool| {
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs -o {options} tmpfs \"$0\" && TMPDIR=\"$0\" exec \"$@\""
            ))
            .arg(&mnt);
        if profile {
            cmd.arg(env!("CARGO_BIN_EXE_mlprof")).args([
                os("run"),
                os("-o"),
                out.as_os_str(),
                os("--"),
            ]);
        }
        cmd.args(args).stdin(std::process::Stdio::null());
        cmd
    };
    let plain = wrap(false).output().expect("run the program");
    let started = std::time::Instant::now();
    let output = wrap(true).output().expect("run mlprof");
    let run = Profiled {
        output,
        elapsed: started.elapsed(),
        profile: std::fs::read_to_string(&out).ok(),
    };
    let _ = std::fs::remove_dir_all(&mnt);
    let _ = std::fs::remove_dir_all(&out_dir);
    Some((plain, run))
}

#[test]
fn a_full_tmpdir_neither_kills_the_program_nor_loses_the_report() {
    let path = script("fill_tmpdir.py");
    for py in pythons() {
        let args = [os(&py.exe), os(&path)];
        let Some((plain, run)) = in_tmpfs("size=16m", &args) else {
            return;
        };
        super::assert_same(&plain, &run.output, &args);
        assert_eq!(run.output.status.code(), Some(6), "{}", py.minor);
        assert!(
            run.elapsed < super::LIMIT,
            "{}: mlprof took {:?}",
            py.minor,
            run.elapsed
        );
        let p = run.profile();
        assert!(
            p.warnings.iter().any(|w| w.contains("out of space")),
            "{}: no warning about the full TMPDIR: {:?}",
            py.minor,
            p.warnings
        );
    }
}

#[test]
fn a_read_only_tmpdir_falls_back_to_another_private_directory() {
    let path = script("stdio_exit.py");
    let py = &pythons()[0];
    let args = [os(&py.exe), os(&path)];
    let Some((plain, run)) = in_tmpfs("ro,size=1m", &args) else {
        return;
    };
    super::assert_same(&plain, &run.output, &args);
    assert_eq!(run.output.status.code(), Some(3));
    assert_eq!(run.profile().exit.code, Some(3));
}

#[test]
fn a_tmpdir_others_can_write_to_is_not_used_for_the_library_or_channels() {
    use std::os::unix::fs::PermissionsExt;
    let unsafe_dir = fixture::tempdir();
    std::fs::set_permissions(&unsafe_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let tmpdir = unsafe_dir.to_str().unwrap();
    let path = script("unsafe_tmpdir.py");
    let py = &pythons()[0];
    let run = profiled(&[], &[os(&py.exe), os(&path)], &[("TMPDIR", tmpdir)]);
    let out = String::from_utf8_lossy(&run.output.stdout);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert!(out.contains("library under TMPDIR: False"), "{out}");
    assert!(out.contains("channels under TMPDIR: False"), "{out}");
    run.profile();
    assert!(
        std::fs::read_dir(&unsafe_dir).unwrap().next().is_none(),
        "mlprof wrote into a directory others can write to"
    );
    let _ = std::fs::remove_dir_all(Path::new(&unsafe_dir));
}

/// `argv` run in a process group of its own (so that the program's killpg reaches mlprof and
/// the program but not this test), without mlprof and under it: both outputs, and the report.
fn in_own_group(argv: &[&OsStr]) -> (Output, Output, Option<String>) {
    use std::os::unix::process::CommandExt;
    let run = |profiled: bool| {
        let out = fixture::tempdir().join("profile.json");
        let mut cmd = if profiled {
            let mut c = fixture::mlprof();
            c.arg("run").arg("-o").arg(&out).arg("--").arg(argv[0]);
            c
        } else {
            Command::new(argv[0])
        };
        let output = cmd
            .args(&argv[1..])
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (output, std::fs::read_to_string(&out).ok())
    };
    let (plain, _) = run(false);
    let (got, profile) = run(true);
    (plain, got, profile)
}

#[test]
fn signals_sent_to_the_whole_process_group_reach_the_program_once() {
    let path = script("signals_group.py");
    for py in pythons() {
        let argv = [os(&py.exe), os(&path)];
        let (plain, got, profile) = in_own_group(&argv);
        let stdout = String::from_utf8_lossy(&got.stdout);
        assert!(
            stdout.contains("received: {'TERM': 1, 'USR1': 1, 'HUP': 1}"),
            "{}: {stdout}",
            py.minor
        );
        super::assert_same(&plain, &got, &argv);
        assert!(profile.is_some(), "{}: no report", py.minor);
    }
}

#[test]
fn group_signals_reach_a_program_that_waits_for_them_once_and_sigprof_never() {
    let path = script("signals_waited.py");
    for mode in ["sigwait", "signalfd", "signalfd_chk"] {
        for py in pythons() {
            let argv = [os(&py.exe), os(&path), os(mode)];
            let (plain, got, profile) = in_own_group(&argv);
            let stdout = String::from_utf8_lossy(&got.stdout);
            // Once each (mlprof, in the group too, forwarded a second before), and never a
            // SIGPROF of mlprof's timer read from the catch-all signalfd.
            assert!(
                stdout.contains("received: {'TERM': 1, 'USR1': 1, 'PROF': 0}"),
                "{mode} {}: {stdout}",
                py.minor
            );
            super::assert_same(&plain, &got, &argv);
            assert!(profile.is_some(), "{mode} {}: no report", py.minor);
        }
    }
}

#[test]
fn threads_ended_by_pthread_exit_leave_no_cpu_timer_behind() {
    // A leaked timer per thread would exhaust RLIMIT_SIGPENDING under thread churn.
    let path = script("thread_timers.py");
    for py in pythons() {
        let run = profiled(&[], &[os(&py.exe), os(&path)], &[]);
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert!(out.contains("timers left: 1"), "{}: {out}", py.minor);
        run.profile();
    }
}

#[test]
fn a_program_whose_seccomp_filter_refuses_process_vm_readv_is_told_why_it_has_no_python_lines() {
    // `same_behaviour` compares exit status and output with a run without mlprof.
    each_python("seccomp_reads.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert!(out.contains("spun True"), "{}: {out}", py.minor);
        let p = run.profile();
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("process_vm_readv refused") && w.contains("seccomp")),
            "{}: {:#?}",
            py.minor,
            p.warnings
        );
    });
}

#[test]
fn sampling_on_the_programs_signal_stack_is_not_taken_for_a_blocked_sigprof() {
    each_python("altstack_spin.py", &[], |py, run| {
        let p = run.profile();
        assert!(
            p.warnings.iter().all(|w| !w.contains("blocked SIGPROF")),
            "{}: {:#?}",
            py.minor,
            p.warnings
        );
        // Sampling went on: the spin's 0.5 s of CPU (by construction) is on its loop, within
        // two sample gaps (on a machine busier than its cores, samples come fewer: 7 once at
        // load 6, so their number says little; the CPU they hold is the kernel's).
        // When the kernel's CPU timers fire late (a machine busier than its cores), the sample
        // straddling the loop's end carries its CPU away: up to the run's largest sample.
        let gap = fixture::mean_gap(&p);
        let largest = p.samples.iter().map(|s| s.cpu_s).fold(0.0, f64::max);
        let lost = (2.0 * gap).max(largest);
        let in_loop = |source: &str| source.contains("@spin") || source.contains("< end:");
        let spin: f64 = p
            .lines
            .iter()
            .filter(|l| l.file.ends_with("altstack_spin.py") && in_loop(&l.source))
            .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
            .sum();
        assert!(
            p.cpu_samples >= 3 && spin >= 0.45 - lost,
            "{}: {} samples, {spin:.3} s on the spin line, {gap:.3} s apart, the largest \
             {largest:.3} s",
            py.minor,
            p.cpu_samples
        );
    });
}

#[test]
fn a_program_that_blocks_sigprof_runs_as_without_mlprof_and_the_report_says_so() {
    // `same_behaviour` compares exit status and output with a run without mlprof.
    each_python("sigprof_blocked.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert!(
            out.contains("blocked before: False")
                && out.contains("thread still blocks SIGPROF: True")
                && out.contains("done"),
            "{}: {out}",
            py.minor
        );
        let p = run.profile();
        let warned: Vec<&String> = p
            .warnings
            .iter()
            .filter(|w| w.contains("blocked SIGPROF"))
            .collect();
        assert_eq!(warned.len(), 1, "{}: {:#?}", py.minor, p.warnings);
        let w = warned[0];
        // The main thread blocked it for its 0.4 s loop and unblocked it; the worker never did.
        let main = format!("thread {} from ", p.processes[0].pid);
        assert!(
            w.contains(&main) && w.contains("where it unblocked it") && w.contains("to its end"),
            "{}: both spans named: {w}",
            py.minor
        );
        assert_eq!(w.matches("thread ").count(), 2, "{}: {w}", py.minor);
        // The CPU the main thread used while it blocked it: its 0.4 s loop (by the kernel's
        // clock of the thread, whatever the machine's load); CPython's subprocess blocks every
        // signal around its vfork too, using no CPU: never told.
        let cpu: f64 = w
            .split(" s of CPU")
            .next()
            .and_then(|head| head.rsplit('(').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{}: no CPU in {w}", py.minor));
        assert!((0.39..0.6).contains(&cpu), "{}: {cpu} s in {w}", py.minor);
    });
}

#[test]
fn a_helper_thread_that_blocks_every_signal_and_waits_is_not_said_to_lose_cpu() {
    // `same_behaviour` compares exit status and output (stderr too) with a run without mlprof.
    each_python("sigprof_idle_blocker.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert!(out.contains("done True"), "{}: {out}", py.minor);
        let p = run.profile();
        assert!(
            p.warnings.iter().all(|w| !w.contains("blocked SIGPROF")),
            "{}: {:#?}",
            py.minor,
            p.warnings
        );
        let err = String::from_utf8_lossy(&run.output.stderr);
        assert!(!err.contains("SIGPROF"), "{}: {err}", py.minor);
    });
}

#[test]
fn a_program_that_resets_handles_or_ignores_sigprof_runs_as_without_mlprof() {
    // `same_behaviour` compares exit status and output with a run without mlprof.
    each_python("sigprof_owner.py", &[], |py, run| {
        let out = String::from_utf8_lossy(&run.output.stdout);
        assert!(
            out.contains("own handler kept: True calls >= 30: True") && out.contains("done True"),
            "{}: {out}",
            py.minor
        );
        let p = run.profile();
        assert!(
            p.cpu_samples >= 20,
            "{}: sampled all along: {}",
            py.minor,
            p.cpu_samples
        );
    });
}
