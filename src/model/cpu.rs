//! CPU samples → time at each place. Each sample goes to the innermost frame in a profiled
//! file (the user's code by default), and is Python time or native time by where the
//! interrupted instruction was; off-CPU samples are waiting time. Pure: native names are
//! resolved beforehand.

use std::collections::{BTreeMap, HashMap};

use mlprof_wire::sample_flags;

use super::filter::Filter;
use super::native_kind::{self, NativeKind};
use super::places::{place_of, Acc, Lines, Place};
use super::pooljoin::Donor;
use super::profile::ThreadStats;
use crate::recording::maps::{code_class, find_mapping, CodeClass, MappedFile};
use crate::recording::{CpuSample, Recording};
use crate::symbolize::native::Resolved;
use crate::symbolize::NativeNames;

/// Where each CPU and waiting sample goes by its own frames, `[channel][sample]` (before pool
/// threads are joined to Python lines): computed once, read by `idle` and [`add`].
pub fn places(rec: &Recording, filter: &Filter) -> Vec<Vec<Place>> {
    rec.channels
        .iter()
        .enumerate()
        .map(|(ci, channel)| {
            let mut lines = Lines::new(rec, ci);
            channel
                .samples
                .iter()
                .map(|s| place_of(&s.frames, s.tid, channel.pid, &mut lines, filter))
                .collect()
        })
        .collect()
}

/// Add every CPU sample of the recording to `places`, at the place [`places`] gave it or, for
/// a thread without Python, the place of the Python sample it was joined to (`donors`,
/// `pooljoin::donors`), and with the weight `counted` says (`idle::counted`:
/// waiting that holds nothing up counts 0 on lines); returns time per thread, every sample's
/// whole weight.
pub fn add(
    rec: &Recording,
    natives: &NativeNames,
    sample_places: &[Vec<Place>],
    donors: &[Vec<Donor>],
    counted: &[Vec<u64>],
    places: &mut HashMap<Place, Acc>,
    gpu: &mut super::gpu::Joiner,
) -> Vec<ThreadStats> {
    let mut threads: BTreeMap<(u32, u32), ThreadStats> = BTreeMap::new();
    let workers = super::idle::WorkersBusy::of(rec);
    for (ci, channel) in rec.channels.iter().enumerate() {
        let placed = super::pooljoin::joined(sample_places, &donors[ci], ci);
        for ((sample, place), &weight) in channel.samples.iter().zip(placed).zip(&counted[ci]) {
            let kind = time_kind(
                sample,
                channel.pid,
                natives.get(&(ci, sample.ip)),
                &channel.maps,
            );
            let thread = threads
                .entry((channel.pid, sample.tid))
                .or_insert_with(|| ThreadStats {
                    pid: channel.pid,
                    tid: sample.tid,
                    ..ThreadStats::default()
                });
            thread.python |= !sample.frames.is_empty();
            if weight == 0 && matches!(kind, Time::Waiting) {
                // Waiting of a helper while its process computed: the thread's, not a line's.
                thread.waiting_s += sample.weight_ns as f64 / 1e9;
                continue;
            }
            let acc = places.entry(place.clone()).or_default();
            let python_thread = !sample.frames.is_empty();
            gpu.observe(channel.pid, sample.t_ns, weight, &place, python_thread, acc);
            // The kernel's time on the thread's page faults is kernel time (a copy into fresh
            // memory), the rest of a CPU sample Python or native by its instruction.
            let faults = match kind {
                Time::Waiting => 0,
                _ => sample.fault_ns.min(sample.weight_ns),
            };
            acc.kernel_ns += faults;
            thread.kernel_s += faults as f64 / 1e9;
            let cpu = sample.weight_ns - faults;
            match kind {
                Time::Waiting => {
                    acc.waiting_ns += weight;
                    if sample.flags & sample_flags::GPU_WAIT != 0 {
                        acc.gpu_calls.gpu_wait_s += weight as f64 / 1e9;
                    }
                    if workers.at(ci, sample.t_ns) {
                        acc.workers_ns += weight;
                    }
                    thread.waiting_s += sample.weight_ns as f64 / 1e9;
                }
                Time::Python => {
                    acc.python_ns += cpu;
                    thread.cpu_python_s += cpu as f64 / 1e9;
                }
                Time::Native(symbol, library) => {
                    acc.native_ns += cpu;
                    thread.cpu_native_s += cpu as f64 / 1e9;
                    let symbol = match native_kind::of(&symbol, &library) {
                        NativeKind::Spin => {
                            acc.spin_ns += cpu;
                            native_kind::SPIN.to_string()
                        }
                        NativeKind::Copy => {
                            acc.copy_loop_ns += cpu;
                            symbol
                        }
                        NativeKind::Work => symbol,
                    };
                    *acc.natives.entry((symbol, library)).or_default() += cpu;
                }
            }
        }
    }
    threads.into_values().collect()
}

/// What kind of time a sample is.
#[derive(Debug, PartialEq)]
enum Time {
    Waiting,
    Python,
    Native(String, String),
}

fn time_kind(sample: &CpuSample, pid: u32, named: Option<&Resolved>, maps: &[MappedFile]) -> Time {
    // Waiting for the GPU is waiting, also where the runtime spun on the CPU meanwhile.
    if sample.flags & (sample_flags::WAITING | sample_flags::GPU_WAIT) != 0 {
        return Time::Waiting;
    }
    match named {
        _ if python_time(sample, pid, named, maps) => Time::Python,
        Some(r) => Time::Native(r.name(), r.library.clone()),
        // Outside every file the process mapped: code generated at run time (numba, JAX/XLA,
        // oneDNN, torch.compile's kernels), or a library mapped after the last look at the maps.
        None => Time::Native(JIT_CODE.to_string(), String::new()),
    }
}

/// The name of native time outside every mapped file.
pub const JIT_CODE: &str = "<JIT code>";

/// Whether a CPU sample of process `pid` is Python time: its instruction in the interpreter
/// (the Python executable, libpython, the C runtime it calls, mlprof's hooks) on a thread
/// running Python. A thread without Python (a BLAS, OpenMP or gloo pool) in libc is native
/// work (`sched_yield` while spinning, `memcpy`, a socket's system calls), named as such; the
/// main thread keeps its interpreter start-up and shutdown as Python. libc or libm called by
/// an extension or by JIT code (numpy's `memcpy` in `a.copy()`, numba's `pow`: the sample's
/// `caller`, the return address the handler found, outside the interpreter) is native too.
pub(super) fn python_time(
    sample: &CpuSample,
    pid: u32,
    named: Option<&Resolved>,
    maps: &[MappedFile],
) -> bool {
    named.is_some_and(|r| r.class == CodeClass::Interpreter)
        && (sample.flags & sample_flags::NO_PYTHON == 0 || sample.tid == pid)
        && !called_from_native(sample, maps)
}

/// Whether the runtime function a sample is in was called by native code: its caller's
/// address in an extension or library that is not the interpreter, or in no mapped file
/// (JIT code).
fn called_from_native(sample: &CpuSample, maps: &[MappedFile]) -> bool {
    sample.caller != 0
        && find_mapping(maps, sample.caller)
            .is_none_or(|m| code_class(&m.path) == CodeClass::Native)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::places::NATIVE_THREAD;

    /// The pool threads' part of `pooljoin::donors`, on one process's samples.
    fn attribute_native_threads(samples: &[CpuSample], placed: &mut [Place]) {
        let join = super::super::pooljoin::PoolJoin::new(samples, placed);
        let moves: Vec<(usize, usize)> = (0..samples.len())
            .filter(|&i| placed[i].file == NATIVE_THREAD)
            .filter_map(|i| Some((i, join.at(samples[i].t_ns)?)))
            .collect();
        for (i, j) in moves {
            placed[i] = placed[j].clone();
        }
    }

    fn place(file: &str) -> Place {
        Place {
            file: file.to_string(),
            line: 1,
            function: "f".to_string(),
            first_line: 1,
        }
    }

    fn sample(t_ms: u64, python: bool) -> CpuSample {
        CpuSample {
            t_ns: t_ms * 1_000_000,
            frames: if python { vec![(1, 0)] } else { Vec::new() },
            ..CpuSample::default()
        }
    }

    #[test]
    fn libc_called_by_an_extension_or_jit_code_is_native() {
        let libm = Resolved {
            library: "libm.so.6".to_string(),
            path: "/usr/lib/x86_64-linux-gnu/libm.so.6".to_string(),
            symbol: Some("pow".to_string()),
            class: CodeClass::Interpreter,
            file_offset: 0x1000,
            function_offset: None,
        };
        let map = |start: u64, path: &str| MappedFile {
            start,
            end: start + 0x1000,
            offset: 0,
            path: path.to_string(),
            executable: true,
            dev: 0,
            inode: 0,
        };
        let maps = [
            map(0x1000, "/usr/bin/python3.11"),
            map(
                0x5000,
                "/site-packages/numpy/_multiarray_umath.cpython-311.so",
            ),
        ];
        let called_from = |caller: u64| CpuSample {
            tid: 10,
            caller,
            ..CpuSample::default()
        };
        assert!(
            python_time(&called_from(0), 10, Some(&libm), &maps),
            "no caller found"
        );
        assert!(
            python_time(&called_from(0x1800), 10, Some(&libm), &maps),
            "the interpreter's own call"
        );
        assert!(
            !python_time(&called_from(0x5800), 10, Some(&libm), &maps),
            "numpy's"
        );
        assert_eq!(
            time_kind(&called_from(0x9000), 10, Some(&libm), &maps),
            Time::Native("pow".to_string(), "libm.so.6".to_string()),
            "JIT code's (outside every mapped file)"
        );
        assert_eq!(
            time_kind(&called_from(0), 10, None, &maps),
            Time::Native(JIT_CODE.to_string(), String::new())
        );
    }

    #[test]
    fn libc_is_python_time_on_python_threads_and_native_on_pool_threads() {
        let libc = Resolved {
            library: "libc.so.6".to_string(),
            path: "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string(),
            symbol: Some("sched_yield".to_string()),
            class: CodeClass::Interpreter,
            file_offset: 0x1000,
            function_offset: None,
        };
        let at = |tid: u32, flags: u32| CpuSample {
            tid,
            flags,
            ..CpuSample::default()
        };
        let pool = at(11, sample_flags::NO_PYTHON);
        assert!(
            python_time(&at(11, 0), 10, Some(&libc), &[]),
            "a Python thread's memcpy"
        );
        assert!(
            !python_time(&pool, 10, Some(&libc), &[]),
            "a pool thread spinning"
        );
        assert!(
            python_time(&at(10, sample_flags::NO_PYTHON), 10, Some(&libc), &[]),
            "the main thread before Python starts"
        );
        assert_eq!(
            time_kind(&pool, 10, Some(&libc), &[]),
            Time::Native("sched_yield".to_string(), "libc.so.6".to_string())
        );
    }

    #[test]
    fn pool_samples_join_the_line_the_python_thread_is_on() {
        let samples = [
            sample(0, true),
            sample(10, false),
            sample(80, false),
            sample(120, true),
        ];
        let mut placed = vec![
            place("a.py"),
            place(NATIVE_THREAD),
            place(NATIVE_THREAD),
            place("a.py"),
        ];
        attribute_native_threads(&samples, &mut placed);
        assert_eq!(placed[1], place("a.py"), "close to a Python sample");
        assert_eq!(placed[2], place("a.py"), "between two that agree");

        let mut placed = vec![
            place("a.py"),
            place(NATIVE_THREAD),
            place(NATIVE_THREAD),
            place("b.py"),
        ];
        attribute_native_threads(&samples, &mut placed);
        assert_eq!(placed[1], place("a.py"));
        assert_eq!(
            placed[2],
            place("b.py"),
            "the Python thread moved (samples 120 ms apart on a loaded machine): the nearer"
        );

        // A training step: the Python thread on three lines within the window; the pool's
        // sample goes to the nearest.
        let step = [
            sample(0, true),
            sample(8, true),
            sample(11, false),
            sample(16, true),
        ];
        let mut placed = vec![
            place("fwd.py"),
            place("bwd.py"),
            place(NATIVE_THREAD),
            place("opt.py"),
        ];
        attribute_native_threads(&step, &mut placed);
        assert_eq!(placed[2], place("bwd.py"));

        // A timed sleep of 10 ms ending at 20 ms (stamped at its middle, 15 ms) after a step
        // sampled at 8 ms: a pool sample at 17 ms is the step's threads spinning on; one at
        // 26 ms, after the thread woke, joins the line it went on to (sampled at 30 ms).
        let mut slept = [
            sample(8, true),
            sample(15, true),
            sample(17, false),
            sample(26, false),
            sample(30, true),
        ];
        slept[1].flags = sample_flags::WAITED | sample_flags::WAITING;
        slept[1].weight_ns = 10_000_000;
        let mut placed = vec![
            place("step.py"),
            place("sleep.py"),
            place(NATIVE_THREAD),
            place(NATIVE_THREAD),
            place("collective.py"),
        ];
        attribute_native_threads(&slept, &mut placed);
        assert_eq!(placed[2], place("step.py"));
        assert_eq!(placed[3], place("collective.py"));

        // A 100 ms sleep in four pieces after a product sampled at 8 ms: OpenBLAS's thread
        // spinning 80 ms into it still belongs to the product.
        let mut pieces = vec![sample(8, true)];
        for mid in [15u64, 40, 65, 95] {
            let mut p = sample(mid, true);
            p.flags = sample_flags::WAITED | sample_flags::WAITING;
            p.weight_ns = if mid == 95 { 30_000_000 } else { 25_000_000 };
            pieces.push(p);
        }
        pieces.push(sample(90, false));
        let mut placed = vec![place("sleep.py"); pieces.len()];
        placed[0] = place("product.py");
        placed[5] = place(NATIVE_THREAD);
        attribute_native_threads(&pieces, &mut placed);
        assert_eq!(placed[5], place("product.py"));

        // A 2 s wait (one wide piece late in a run, stamped at its middle, 10 s) found
        // however far its stamp is: pool samples 10 ms and 200 ms into it join the line the
        // thread was on when it began.
        let mut long = [
            sample(8_995, true),
            sample(10_000, true),
            sample(9_010, false),
            sample(9_200, false),
        ];
        long[1].flags = sample_flags::WAITED | sample_flags::WAITING;
        long[1].weight_ns = 2_000_000_000;
        let mut placed = vec![
            place("before.py"),
            place("sleep.py"),
            place(NATIVE_THREAD),
            place(NATIVE_THREAD),
        ];
        attribute_native_threads(&long, &mut placed);
        assert_eq!(placed[2], place("before.py"));
        assert_eq!(placed[3], place("before.py"));

        // 400 ms apart while the Python thread ran all along (its later sample stands for
        // 400 ms of CPU: samples of it were lost): too far apart to tell.
        let mut far = [sample(0, true), sample(200, false), sample(400, true)];
        far[2].weight_ns = 400_000_000;
        let mut placed = vec![place("a.py"), place(NATIVE_THREAD), place("a.py")];
        attribute_native_threads(&far, &mut placed);
        assert_eq!(placed[1], place(NATIVE_THREAD), "too far apart to tell");

        // As far apart, but the Python thread ran 20 ms of CPU meanwhile: it was starved of
        // the CPU (a machine loaded beyond its cores), still on its line; where it moved on
        // meanwhile, the nearer side.
        far[2].weight_ns = 20_000_000;
        let mut placed = vec![place("a.py"), place(NATIVE_THREAD), place("a.py")];
        attribute_native_threads(&far, &mut placed);
        assert_eq!(placed[1], place("a.py"), "starved, not moved");
        let starved = [
            sample(0, true),
            sample(300, false),
            sample(700, false),
            CpuSample {
                weight_ns: 20_000_000,
                ..sample(1_000, true)
            },
        ];
        let mut placed = vec![
            place("a.py"),
            place(NATIVE_THREAD),
            place(NATIVE_THREAD),
            place("b.py"),
        ];
        attribute_native_threads(&starved, &mut placed);
        assert_eq!((&placed[1], &placed[2]), (&place("a.py"), &place("b.py")));
    }
}
