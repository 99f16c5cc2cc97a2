//! The pure core on hand-made recordings (`recording::build`): attribution of CPU time by line
//! and kind, bytes held at the peak, leak evidence, GPU figures joined to lines, and whole
//! stacks, each against figures known by construction.

use super::{attribute, Filter, Idle, LineStats, Profile};
use crate::recording::build::{RecordingBuilder, PID};
use crate::recording::maps::CodeClass;
use crate::recording::Recording;
use crate::symbolize::native::Resolved;
use crate::symbolize::NativeNames;

const MB: u64 = 1 << 20;
/// An instruction pointer in the interpreter, and one in BLAS.
const IN_PYTHON: u64 = 0x55_0000;
const IN_BLAS: u64 = 0x7f_0000;

fn names() -> NativeNames {
    let named = |library: &str, symbol: &str, class| Resolved {
        library: library.into(),
        path: format!("/lib/{library}"),
        symbol: Some(symbol.into()),
        class,
        file_offset: 0,
        function_offset: None,
    };
    NativeNames::from([
        (
            (0, IN_PYTHON),
            named(
                "libpython3.10.so",
                "_PyEval_EvalFrameDefault",
                CodeClass::Interpreter,
            ),
        ),
        (
            (0, IN_BLAS),
            named("libopenblas.so", "dgemm_kernel", CodeClass::Native),
        ),
    ])
}

fn profile(rec: &Recording) -> Profile {
    attribute(rec, &names(), &Filter::default())
}

fn line<'p>(p: &'p Profile, file: &str, line: u32) -> &'p LineStats {
    p.lines
        .iter()
        .find(|l| l.file == file && l.line == line)
        .unwrap_or_else(|| panic!("no line {file}:{line} in {:?}", p.lines))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn cpu_time_goes_to_its_line_split_into_python_native_and_waiting() {
    // train.py: `main` at line 1; code units 0-3 run lines 1-4.
    let mut b = RecordingBuilder::new(1_000).code(1, "/w/train.py", "main", 1, &[1, 2, 3, 4]);
    for i in 0..30 {
        b = b.cpu(10 * i, PID, IN_PYTHON, 10, &[(1, 1)]);
    }
    for i in 0..20 {
        b = b.cpu(300 + 10 * i, PID, IN_BLAS, 10, &[(1, 2)]);
    }
    for i in 0..10 {
        b = b.waiting(500 + 10 * i, PID, 10, &[(1, 3)]);
    }
    let p = profile(&b.build());
    let python = &line(&p, "/w/train.py", 2).measures;
    assert!(close(python.cpu_python_s, 0.3) && python.cpu_native_s == 0.0);
    let native = &line(&p, "/w/train.py", 3).measures;
    assert!(close(native.cpu_native_s, 0.2) && native.cpu_python_s == 0.0);
    assert_eq!(native.native.len(), 1);
    assert_eq!(
        (
            native.native[0].symbol.as_str(),
            native.native[0].library.as_str()
        ),
        ("dgemm_kernel", "libopenblas.so")
    );
    assert!(close(native.native[0].cpu_s, 0.2));
    let waiting = &line(&p, "/w/train.py", 4).measures;
    assert!(close(waiting.waiting_s, 0.1) && waiting.cpu_python_s == 0.0);
    assert_eq!(p.cpu_samples, 50, "waiting samples are not CPU samples");
    let main = p.functions.iter().find(|f| f.function == "main").unwrap();
    assert!(close(
        main.measures.cpu_python_s + main.measures.cpu_native_s,
        0.5
    ));
}

#[test]
fn library_frames_and_pool_threads_charge_the_user_line_that_called_them() {
    // A call from train.py line 2 into a site-packages function: the time is train.py's. A
    // pool thread (no Python frames) busy within 25 ms of it works for that line; one busy
    // long after it, when no Python thread ran, stays a native thread of its own.
    let lib = "/venv/lib/python3.10/site-packages/lib/core.py";
    let rec = RecordingBuilder::new(100)
        .code(1, "/w/train.py", "main", 1, &[1, 2])
        .code(2, lib, "work", 10, &[10, 11])
        .cpu(10, PID, IN_PYTHON, 40, &[(2, 1), (1, 1)])
        .cpu(15, 101, IN_BLAS, 5, &[])
        .cpu(90, 101, IN_BLAS, 7, &[])
        .build();
    let p = profile(&rec);
    let user = &line(&p, "/w/train.py", 2).measures;
    assert!(close(user.cpu_python_s, 0.04) && close(user.cpu_native_s, 0.005));
    assert!(
        p.lines.iter().all(|l| l.file != lib),
        "library lines are not reported"
    );
    let pool: f64 = p
        .lines
        .iter()
        .filter(|l| l.file.starts_with('<'))
        .map(|l| l.measures.cpu_native_s)
        .sum();
    assert!(close(pool, 0.007), "{pool}");
}

#[test]
fn bytes_held_at_the_peak_go_to_the_lines_that_hold_them() {
    // mem.py: units 0-2 run lines 10-12. The heap peaks at 500 ms.
    let code = |b: RecordingBuilder| b.code(2, "/w/mem.py", "build", 10, &[10, 11, 12]);
    let rec = code(RecordingBuilder::new(1_000))
        // Line 10: 100 MB before the peak, freed after it: held at the peak.
        .alloc(100, 0x1000, 100 * MB, &[(2, 0)], Some(900), false)
        // Line 11: 50 MB after the peak: allocated, never held at it.
        .alloc(600, 0x2000, 50 * MB, &[(2, 1)], Some(700), false)
        // Line 12: 30 MB of Python objects, freed before the peak.
        .alloc(200, 0x3000, 30 * MB, &[(2, 2)], Some(300), true)
        .peak_mark(150, 100 * MB)
        .peak_mark(500, 120 * MB)
        .build();
    let p = profile(&rec);
    let held = |l| line(&p, "/w/mem.py", l).measures.peak_bytes;
    assert_eq!((held(10), held(11), held(12)), (100 * MB, 0, 0));
    let m = |l| line(&p, "/w/mem.py", l).measures.clone();
    assert_eq!((m(10).alloc_bytes, m(11).alloc_bytes), (100 * MB, 50 * MB));
    assert_eq!(
        (m(12).alloc_bytes, m(12).alloc_python_bytes),
        (30 * MB, 30 * MB)
    );
    assert_eq!(m(10).alloc_python_bytes, 0);
    assert!(m(10).leak.is_none() && m(11).leak.is_none());
}

#[test]
fn a_line_whose_blocks_are_never_freed_is_a_likely_leak_and_churn_is_not() {
    let mut b = RecordingBuilder::new(10_000).code(3, "/w/loop.py", "step", 20, &[20, 21]);
    for i in 0..200u64 {
        // Line 20 keeps 1 MB per step; line 21 frees its block within the step.
        b = b
            .alloc(50 * i, 0x10_0000 + i * 64, MB, &[(3, 0)], None, false)
            .alloc(
                50 * i + 1,
                0x90_0000 + i * 64,
                MB,
                &[(3, 1)],
                Some(50 * i + 20),
                false,
            );
    }
    let p = profile(&b.peak_mark(9_950, 200 * MB).build());
    let leak = line(&p, "/w/loop.py", 20)
        .measures
        .leak
        .expect("line 20 leaks");
    assert!(leak.likelihood > 0.99, "{leak:?}");
    // 1 MB every 50 ms: 20 MB a second.
    let rate = leak.bytes_per_s / (20 * MB) as f64;
    assert!((0.9..1.1).contains(&rate), "{leak:?}");
    assert!(line(&p, "/w/loop.py", 21).measures.leak.is_none());
    assert_eq!(line(&p, "/w/loop.py", 20).measures.peak_bytes, 200 * MB);
    assert_eq!(line(&p, "/w/loop.py", 21).measures.peak_bytes, 0);
}

#[test]
fn gpu_busy_time_and_memory_growth_go_to_the_lines_running_beside_them() {
    // Line 31 runs for the first half second while the GPU is 80% busy and its memory grows
    // by 1 GiB; line 32 runs for the second half while it is idle and flat.
    let mut b = RecordingBuilder::new(1_000).code(4, "/w/gpu.py", "train", 30, &[30, 31, 32]);
    for i in 0..50 {
        b = b.cpu(10 * i + 5, PID, IN_PYTHON, 10, &[(4, 1)]);
        b = b.cpu(500 + 10 * i + 5, PID, IN_PYTHON, 10, &[(4, 2)]);
    }
    for k in 0..=10u64 {
        let memory = if k >= 3 { 1 << 30 } else { 0 };
        let util = if k <= 5 { 80 } else { 0 };
        b = b.gpu_poll(100 * k, memory, util);
    }
    let p = profile(&b.build());
    assert!(p.gpu.available);
    assert_eq!(p.gpu.peak_memory_bytes, 1 << 30);
    let busy = &line(&p, "/w/gpu.py", 31).measures;
    let idle = &line(&p, "/w/gpu.py", 32).measures;
    assert!(
        (busy.gpu_util_pct - 80.0).abs() < 1.0,
        "{}",
        busy.gpu_util_pct
    );
    assert!(idle.gpu_util_pct < 1.0, "{}", idle.gpu_util_pct);
    assert_eq!((busy.gpu_memory_bytes, idle.gpu_memory_bytes), (1 << 30, 0));
    assert_eq!(p.processes[0].peak_gpu_memory_bytes, 1 << 30);
}

#[test]
fn stacks_keep_the_whole_call_path_with_the_native_leaf() {
    let rec = RecordingBuilder::new(100)
        .code(1, "/w/train.py", "main", 1, &[1, 2])
        .code(2, "/w/model.py", "forward", 7, &[7, 8])
        .cpu(10, PID, IN_BLAS, 30, &[(2, 1), (1, 1)])
        .cpu(20, PID, IN_PYTHON, 10, &[(2, 0), (1, 1)])
        .alloc(30, 0x1000, 4 * MB, &[(2, 0), (1, 1)], None, false)
        .peak_mark(40, 4 * MB)
        .build();
    let p = profile(&rec);
    let named = |s: &super::StackStats| -> Vec<(String, u32)> {
        s.frames
            .iter()
            .map(|&i| {
                let f = &p.stack_frames[i as usize];
                (f.function.clone(), f.line)
            })
            .collect()
    };
    let native = p
        .stacks
        .iter()
        .find(|s| s.cpu_native_s > 0.0)
        .expect("a native stack");
    assert_eq!(
        named(native),
        [
            ("main".to_string(), 2),
            ("forward".to_string(), 8),
            ("dgemm_kernel".to_string(), 0)
        ],
        "outermost first, the native function as the leaf"
    );
    assert!(close(native.cpu_native_s, 0.03));
    let python = p
        .stacks
        .iter()
        .find(|s| s.cpu_python_s > 0.0)
        .expect("a Python stack");
    assert_eq!(
        named(python),
        [("main".to_string(), 2), ("forward".to_string(), 7)]
    );
    let held = p.stacks.iter().find(|s| s.alloc_bytes > 0).unwrap();
    assert_eq!((held.alloc_bytes, held.peak_bytes), (4 * MB, 4 * MB));
    assert!(p.stacks.iter().all(|s| s.pid == PID));
}

#[test]
fn import_machinery_is_folded_out_of_stacks_and_the_time_stays_on_the_import_line() {
    let boot = "<frozen importlib._bootstrap>";
    let rec = RecordingBuilder::new(100)
        .code(1, "/w/train.py", "<module>", 1, &[1, 2])
        .code(2, boot, "_find_and_load", 1000, &[1000])
        .code(
            3,
            "<frozen importlib._bootstrap_external>",
            "exec_module",
            900,
            &[900],
        )
        .code(4, "/w/heavy.py", "<module>", 1, &[1, 2, 3])
        .cpu(
            10,
            PID,
            IN_PYTHON,
            50,
            &[(4, 2), (3, 0), (2, 0), (2, 0), (1, 1)],
        )
        .build();
    let p = profile(&rec);
    let stack = &p.stacks[0];
    let names: Vec<(&str, u32)> = stack
        .frames
        .iter()
        .map(|&i| {
            let f = &p.stack_frames[i as usize];
            (f.file.as_str(), f.line)
        })
        .collect();
    assert_eq!(names, [("/w/train.py", 2), ("/w/heavy.py", 3)]);
    assert!(p.stack_frames.iter().all(|f| !f.file.contains("importlib")));
    // Lines: the innermost user frame (the imported module's own line) keeps the time.
    assert!(close(
        line(&p, "/w/heavy.py", 3).measures.cpu_python_s,
        0.05
    ));
}

#[test]
fn helper_threads_idle_while_the_main_thread_computes_stay_off_the_lines_unless_idle() {
    // Main computes at line 2 for 1 s; six helpers wait in `queue.get()` (line 5) all along.
    let mut b = RecordingBuilder::new(1_000).code(1, "/w/pool.py", "main", 1, &[1, 2, 3, 4, 5]);
    for i in 0..100 {
        b = b.cpu(10 * i, PID, IN_PYTHON, 10, &[(1, 1)]);
    }
    for helper in 1..=6 {
        for i in 0..50 {
            b = b.waiting(20 * i, PID + helper, 20, &[(1, 4)]);
        }
    }
    let rec = b.build();
    let p = profile(&rec);
    assert_eq!(p.idle, Idle::Main);
    assert!(close(line(&p, "/w/pool.py", 2).measures.cpu_python_s, 1.0));
    assert!(p.lines.iter().all(|l| l.measures.waiting_s == 0.0));
    let waited: f64 = p.threads.iter().map(|t| t.waiting_s).sum();
    assert!(close(waited, 6.0), "threads keep their waiting: {waited}");
    assert!(super::invariants::violations(&p).is_empty());
    let all = attribute(
        &rec,
        &names(),
        &Filter {
            idle: true,
            ..Filter::default()
        },
    );
    assert_eq!(all.idle, Idle::All);
    assert!(close(line(&all, "/w/pool.py", 5).measures.waiting_s, 6.0));
    assert!(super::invariants::violations(&all).is_empty());
}

#[test]
fn busy_threads_are_counted_at_once_not_over_the_run() {
    // Four pool threads busy in 0-1 s, four others in 1-2 s: four at once, not eight.
    let mut b = RecordingBuilder::new(2_000).code(1, "/w/train.py", "main", 1, &[1, 2]);
    for tid in 0..8u32 {
        let from = if tid < 4 { 0 } else { 1_000 };
        for i in 0..100 {
            b = b.cpu(from + 10 * i, PID + 1 + tid, IN_BLAS, 10, &[]);
        }
    }
    let p = profile(&b.build());
    let main = p.processes.iter().find(|q| q.pid == PID).unwrap();
    assert_eq!(main.peak_busy_threads, 4);
}

#[test]
fn busy_threads_starved_by_other_programs_count_their_run_queue_delay() {
    // Eight pool threads on a machine loaded beyond its cores: each runs 10 ms of every
    // 125 ms (less than a tenth of a stretch) and waits in the run queue for the rest. A
    // ninth thread queues as long but never runs long enough to be sampled: not busy.
    let mut b = RecordingBuilder::new(2_000).code(1, "/w/train.py", "main", 1, &[1, 2]);
    for tid in 0..8u32 {
        for i in 0..16 {
            b = b.cpu(125 * i + 5, PID + 1 + tid, IN_BLAS, 10, &[]);
        }
    }
    let mut rec = b.build();
    assert_eq!(profile(&rec).processes[0].peak_busy_threads, 0);
    let slot = crate::recording::QUEUED_SLOT_NS;
    for tid in 0..9u32 {
        for k in 0..20 {
            rec.channels[0]
                .queued
                .push((k * slot, PID + 1 + tid, slot * 9 / 10));
        }
    }
    assert_eq!(profile(&rec).processes[0].peak_busy_threads, 8);
}

#[test]
fn a_librarys_own_python_threads_work_for_the_main_threads_line() {
    // A helper thread whose stack holds library frames only (scikit-learn's k-means threads)
    // computes while the main thread is at train.py line 2: its CPU is that line's, not
    // <outside profiled code>. A helper computing long after the main thread left stays out.
    let lib = "/venv/lib/python3.10/site-packages/lib/pool.py";
    let rec = RecordingBuilder::new(1_000)
        .code(1, "/w/train.py", "main", 1, &[1, 2])
        .code(2, lib, "worker", 10, &[10, 11])
        .cpu(10, PID, IN_PYTHON, 10, &[(1, 1)])
        .cpu(20, PID, IN_PYTHON, 10, &[(1, 1)])
        .cpu(15, PID + 1, IN_BLAS, 30, &[(2, 0)])
        .cpu(900, PID + 1, IN_BLAS, 20, &[(2, 0)])
        .build();
    let p = profile(&rec);
    let user = &line(&p, "/w/train.py", 2).measures;
    assert!(close(user.cpu_native_s, 0.03), "{user:?}");
    let outside = &line(&p, "<outside profiled code>", 0).measures;
    assert!(close(outside.cpu_native_s, 0.02), "{outside:?}");
}

#[test]
fn a_process_row_holds_the_cpu_its_samples_hold_when_proc_was_read_before_its_end() {
    // 0.5 s of CPU sampled (its last sample a tail sent at its end); /proc was last read when
    // it had used 0.3 s.
    let mut b = RecordingBuilder::new(1_000).code(1, "/w/train.py", "main", 1, &[1, 2]);
    for i in 0..50 {
        b = b.cpu(10 * i, PID, IN_PYTHON, 10, &[(1, 1)]);
    }
    let mut rec = b.build();
    rec.procs.push(crate::recording::ProcSummary {
        pid: PID,
        peak_rss_bytes: 1,
        cpu_s: 0.3,
    });
    let p = profile(&rec);
    assert!(close(p.processes[0].cpu_s, 0.5), "{}", p.processes[0].cpu_s);
    // A later /proc reading above the samples (threads never sampled) stands.
    rec.procs[0].cpu_s = 0.8;
    assert!(close(profile(&rec).processes[0].cpu_s, 0.8));
}
