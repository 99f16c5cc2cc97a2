//! `mlprof attach PID`: a running CPython profiled from outside, without restarting or
//! stopping it. Every sampling period, each thread: its CPU clock and state as the kernel keeps
//! them (`/proc/PID/task/TID/schedstat`, `stat`), its Python stack read with `process_vm_readv`
//! (the walker the collector uses for waiting threads), and, when it ran, where: the newest
//! user-space instruction pointer a perf event on its CPU clock recorded (Python vs native, and
//! which native function). A thread's sample stands for the CPU time it used since the previous
//! look (never the wall time: on a busy machine a runnable thread runs a fraction of it), at the
//! line it is on now (the chance of finding it on a line is its share of time there, as with
//! py-spy's samples); a Python thread found sleeping waited for the rest of that time. RSS from
//! `/proc`. No allocation hooks: memory per line is not measured.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mlprof_pyframes::check::Types;
use mlprof_pyframes::layouts::{self, Source};
use mlprof_pyframes::{walk, Interpreter};
use mlprof_wire::{python_status, sample_flags};

use super::events::Decoded;
use super::perf::{OpenError, ThreadIps};
use super::remote::Remote;
use super::{interpreter, monotonic_ns, procfs, waits};
use crate::error::{Error, Result};
use crate::recording::mapped::{self, MAX_INTERPRETER_BYTES};
use crate::recording::maps::{library_name, MappedFile};
use crate::recording::{ChannelSummary, ChildExit, CpuSample, ProcSummary, Recording, Tick, Usage};

/// How to attach.
pub struct Options<'a> {
    /// The process.
    pub pid: u32,
    /// Stop after this long (else at `stop`, or when the process ends).
    pub duration: Option<Duration>,
    /// Samples per second.
    pub rate_hz: u32,
    /// Set (by a signal handler) to stop early.
    pub stop: &'a AtomicBool,
    /// `CLOCK_MONOTONIC` nanoseconds the profile's times count from (`collect::monotonic_ns`).
    pub start_ns: u64,
}

/// The interpreter found in the target.
struct Python {
    /// `3.11.7` (or `3.11` when only the file name tells; `3.13.5t` for a free-threaded
    /// build).
    version: String,
    layout: layouts::Layout,
    /// Read from the interpreter's `_Py_DebugOffsets` alone: checked on its stacks first.
    unchecked: bool,
    runtime: u64,
    code_type: u64,
    /// `PyUnicode_Type`, `PyBytes_Type`: what the self-check compares against.
    types: Types,
}

/// CPU time between two instruction pointers perf records on a thread: the newest one when a
/// round reads the thread's stack is at most this old.
const PERF_PERIOD_NS: u64 = 500_000;
/// Deepest stack read.
const MAX_DEPTH: usize = 128;
/// Most threads of the interpreter looked at.
const MAX_THREADS: usize = 512;
/// Most perf events held at once.
const MAX_EVENTS: usize = 4096;
/// Descriptors kept free of perf events: for the `/proc` files each round reads, and at the end
/// the report.
const SPARE_FDS: u64 = 16;

/// Profile `opts.pid` until the duration is over, `opts.stop` is set, or it ends.
pub fn record(opts: &Options) -> Result<Recording> {
    let pid = opts.pid;
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() || !procfs::alive(pid) {
        return Err(Error::new(format!("no such process: {pid}")));
    }
    let maps = match procfs::read_maps(pid) {
        Ok(maps) => maps,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(not_permitted(pid));
        }
        Err(e) => {
            return Err(Error::new(format!(
                "cannot read the memory map of process {pid}: {e}"
            )))
        }
    };
    let python = find_python(pid, &maps)?;
    probe(pid, python.runtime)?;
    let period = Duration::from_secs_f64(1.0 / opts.rate_hz.max(1) as f64);
    let period_ns = period.as_nanos() as u64;
    let interp = Interpreter {
        layout: &python.layout,
        code_type: python.code_type as usize,
    };
    if python.unchecked {
        let mem = Remote::new(pid);
        let mut states = vec![(0usize, 0usize, None); MAX_THREADS];
        let n = walk::threads(&mem, &python.layout, python.runtime as usize, &mut states);
        let tstates: Vec<usize> = states[..n].iter().map(|s| s.0).collect();
        interpreter::self_check(&mem, &interp, &python.types, &tstates).map_err(|why| {
            Error::new(format!(
                "process {pid} runs CPython {}, but {why}: its lines would not be right",
                python.version
            ))
        })?;
    }
    // An address in the interpreter's code, for CPU time where no instruction pointer was
    // sampled (perf events not permitted): it counts as Python.
    let interpreter_ip = maps
        .iter()
        .find(|m| m.executable && is_python_file(library_name(&m.path)))
        .map_or(0, |m| m.start);
    let mut decoded = Decoded::default();
    let mut perf = Perf::new(open_files_limit());
    let mut looks: HashMap<u32, Look> = HashMap::new();
    // Of each Python thread, the stack its last look found it running on (none once a look
    // found it asleep): see `ran_at`.
    let mut running_at: HashMap<u32, Vec<(u32, i32)>> = HashMap::new();
    // Whether a look has counted the threads' clocks yet (they count from there).
    let mut looked = false;
    // The process's CPU time at the first look, for the profile's totals.
    let mut usage_before = (0.0, 0.0);
    let ns_per_tick = 1_000_000_000 / clock_ticks_per_s();
    let mut pthreads: BTreeMap<u32, u64> = BTreeMap::new();
    let mut ticks = Vec::new();
    let mut proc_summary = ProcSummary {
        pid,
        ..ProcSummary::default()
    };
    let start = Instant::now();
    let start_ns = opts.start_ns;
    let mut last_wall = start_ns;
    let mut ended = false;
    let mut states = vec![(0usize, 0usize, None); MAX_THREADS];
    let mut frames = [walk::Frame::default(); MAX_DEPTH];
    let mut ips = Vec::new();
    let mut round = 0u64;
    // Before 3.11 a thread state does not hold its kernel tid: it is read from the thread's
    // glibc descriptor (its `pthread_t`), at an offset found once (`pthread_tid_offset`).
    let mut tid_at: Option<usize> = None;
    loop {
        let now_abs = monotonic_ns();
        let now = now_abs - start_ns;
        match procfs::read(pid, round.is_multiple_of(5), true) {
            Some(reading) => {
                proc_summary.peak_rss_bytes = proc_summary.peak_rss_bytes.max(reading.hwm_bytes);
                proc_summary.cpu_s = reading.cpu_s.unwrap_or(proc_summary.cpu_s);
                ticks.push(Tick {
                    t_ns: now,
                    heap_bytes: 0,
                    rss_bytes: reading.rss_bytes,
                    mapped_bytes: 0,
                    anon_bytes: reading.anon_bytes,
                });
            }
            None if ended_now(pid) => {
                ended = true;
                break;
            }
            // Unreadable for another reason (mlprof short of descriptors): it runs on.
            None => {}
        }
        if !looked {
            usage_before = procfs::usage(pid).unwrap_or(usage_before);
        }
        if let Some(all) = tasks(pid, ns_per_tick) {
            let wall_delta = now_abs - last_wall;
            last_wall = now_abs;
            // Its reads are cached by block: a fresh one each round sees the threads as they are.
            let mem = Remote::new(pid);
            let n = walk::threads(&mem, &python.layout, python.runtime as usize, &mut states);
            let listed: HashSet<u32> = all.iter().map(|&(tid, _)| tid).collect();
            // The threads that ended: their events' descriptors closed, their clocks forgotten.
            perf.keep(&listed);
            looks.retain(|tid, _| listed.contains(tid));
            running_at.retain(|tid, _| listed.contains(tid));
            if python.layout.tstate_native_thread_id.is_none() && tid_at.is_none() {
                let live: Vec<u32> = all.iter().map(|&(tid, _)| tid).collect();
                tid_at = pthread_tid_offset(&mem, &states[..n], &live);
            }
            let by_tid: HashMap<u32, (usize, usize)> = states[..n]
                .iter()
                .filter_map(|&(tstate, pthread, tid)| {
                    let tid = tid.or_else(|| read_u32(&mem, pthread + tid_at?))?;
                    Some((tid, (tstate, pthread)))
                })
                .collect();
            for (tid, task) in all {
                // A thread that exited between the listing and its files: nothing to count.
                let Some(task) = task else { continue };
                let previous = looks.insert(tid, Look::of(&task));
                let counted = since_last(previous.as_ref(), &task, !looked, wall_delta);
                // Events go to the threads that run: one for a thread new to the look or that
                // ran since the last, none opened for one that did not.
                let has_event = match counted {
                    Some((0, _)) => perf.has(tid),
                    _ => perf.open(tid),
                };
                ips.clear();
                perf.drain(tid, &mut ips);
                let Some((cpu_ns, queued_ns)) = counted else {
                    continue;
                };
                let python_thread = by_tid.get(&tid).copied();
                // A Python thread asleep now was blocked for the time it neither ran nor waited
                // for a CPU.
                let blocked_ns = if matches!(task.state, 'S' | 'D') && python_thread.is_some() {
                    wall_delta.saturating_sub(cpu_ns.saturating_add(queued_ns))
                } else {
                    0
                };
                if cpu_ns == 0 && blocked_ns == 0 {
                    continue;
                }
                let stack: Vec<(u32, i32)> = match python_thread {
                    Some((tstate, pthread)) => {
                        pthreads.insert(tid, pthread as u64);
                        let w = walk::walk_ends(
                            &mem,
                            &interp,
                            tstate,
                            &mut frames,
                            walk::OUTER_FRAMES,
                            walk::WALK_LIMIT,
                        );
                        frames[..w.depth]
                            .iter()
                            .map(|f| {
                                let id = waits::code_id(&mem, &python.layout, f.code, &mut decoded);
                                (id, f.lasti)
                            })
                            .collect()
                    }
                    None => Vec::new(),
                };
                let asleep = matches!(task.state, 'S' | 'D');
                let ran_at = ran_at(&mut running_at, tid, asleep, &stack);
                if cpu_ns > 0 {
                    perf.ran(tid, has_event);
                    // Where it runs: the newest instruction pointer perf recorded (at most half
                    // a millisecond of its CPU time before the look).
                    let ip = ips.last().copied().unwrap_or(if python_thread.is_some() {
                        interpreter_ip
                    } else {
                        0
                    });
                    decoded.samples.push(CpuSample {
                        t_ns: now,
                        tid,
                        ip,
                        weight_ns: cpu_ns,
                        flags: if python_thread.is_some() {
                            0
                        } else {
                            sample_flags::NO_PYTHON
                        },
                        frames: ran_at,
                        caller: 0,
                        fault_ns: 0,
                    });
                }
                if blocked_ns > 0 && !stack.is_empty() {
                    decoded.push_waiting(CpuSample {
                        t_ns: now,
                        tid,
                        ip: 0,
                        weight_ns: blocked_ns,
                        flags: sample_flags::WAITING,
                        frames: stack,
                        caller: 0,
                        fault_ns: 0,
                    });
                }
            }
            looked = true;
        }
        round += 1;
        if opts.stop.load(Ordering::Acquire) || opts.duration.is_some_and(|d| start.elapsed() >= d)
        {
            break;
        }
        let next = start + period * round as u32;
        let left = next.saturating_duration_since(Instant::now());
        std::thread::sleep(left);
    }
    let wall_ns = monotonic_ns() - start_ns;
    let usage_after = procfs::usage(pid).unwrap_or(usage_before);
    let perf_warnings = perf.warnings();
    drop(perf);
    let usage = Usage {
        user_s: (usage_after.0 - usage_before.0).max(0.0),
        kernel_s: (usage_after.1 - usage_before.1).max(0.0),
        maxrss_bytes: proc_summary.peak_rss_bytes,
    };
    let mut warnings = vec![format!(
        "attached to process {pid} for {:.1} s{}: CPU and waiting per line from its threads' \
         stacks, read from outside {} times a second, and RSS from /proc; memory per line, \
         the heap, copies and GPU work per line (CUDA calls, kernels, tensors) are not \
         measured in attach mode (they need `mlprof run`; NVML's view of the process is kept)",
        wall_ns as f64 / 1e9,
        if ended { " (it ended meanwhile)" } else { "" },
        opts.rate_hz
    )];
    warnings.extend(perf_warnings);
    let command = cmdline(pid);
    let ppid = ppid(pid);
    let samples = std::mem::take(&mut decoded.samples);
    let channel = ChannelSummary {
        pid,
        ppid,
        start_ns: 0,
        command: command.clone(),
        python: Some(python.version.clone()),
        python_status: if python.unchecked {
            python_status::WALKED_OFFSETS
        } else {
            python_status::WALKED
        },
        sample_interval_ns: period_ns,
        samples,
        codes: std::mem::take(&mut decoded.codes),
        threads: pthreads.into_iter().collect(),
        maps: procfs::read_maps(pid).unwrap_or(maps),
        py_runtime: python.runtime,
        py_code_type: python.code_type,
        last_wait_ns: wall_ns,
        still_running: !ended,
        ..ChannelSummary::default()
    };
    Ok(Recording {
        command,
        wall_ns,
        child_pid: pid,
        exit: ChildExit {
            usage,
            ..ChildExit::default()
        },
        channels: vec![channel],
        procs: vec![proc_summary],
        ticks,
        warnings,
        labels: super::labels(),
        gpu: Default::default(),
        gpu_tensors: Vec::new(),
        setup: crate::recording::Setup {
            cpus: super::cpus(),
            attached: true,
            ..Default::default()
        },
        profiler: crate::recording::ProfilerCost {
            cpu_ns: super::pace::process_cpu_ns(),
            ..Default::default()
        },
    })
}

/// Largest offset of the kernel tid in glibc's thread descriptor looked at.
const MAX_TID_OFFSET: usize = 0x1000;

/// Where glibc keeps the kernel tid in a thread's descriptor (`struct pthread`, which a
/// `pthread_t` points to): the offset at which the descriptors of the most Python threads hold
/// one of the process's live tids (ties: the lowest). `None` if none does.
fn pthread_tid_offset(
    mem: &Remote,
    threads: &[(usize, usize, Option<u32>)],
    live: &[u32],
) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for offset in (0..MAX_TID_OFFSET).step_by(4) {
        let hits = threads
            .iter()
            .filter(|&&(_, pthread, _)| {
                pthread != 0 && read_u32(mem, pthread + offset).is_some_and(|t| live.contains(&t))
            })
            .count();
        if hits > 0 && best.is_none_or(|(_, most)| hits > most) {
            best = Some((offset, hits));
        }
    }
    best.map(|(offset, _)| offset)
}

fn read_u32(mem: &Remote, addr: usize) -> Option<u32> {
    use mlprof_pyframes::Memory;
    mem.int(addr).map(|v| v as u32)
}

fn is_python_file(name: &str) -> bool {
    (name.starts_with("python") && !name.contains(".so")) || name.starts_with("libpython")
}

/// Find `_PyRuntime` and `PyCode_Type` in the target's executable or libpython, and its
/// version.
fn find_python(pid: u32, maps: &[MappedFile]) -> Result<Python> {
    let mut seen = Vec::new();
    // The first interpreter file that could not be read, and why.
    let mut unread: Option<(&str, String)> = None;
    for m in maps {
        let name = library_name(&m.path);
        if !is_python_file(name) || seen.contains(&m.path) {
            continue;
        }
        seen.push(m.path.clone());
        let symbols = match elf_symbols(pid, m) {
            Ok(symbols) => symbols,
            Err(why) => {
                unread.get_or_insert((&m.path, why));
                continue;
            }
        };
        let Some(&runtime) = symbols.values.get("_PyRuntime") else {
            continue;
        };
        let Some(&code_type) = symbols.values.get("PyCode_Type") else {
            continue;
        };
        // The load bias: where the file's first byte is mapped, less its first segment's
        // address (0 for position-independent files).
        let Some(base) = maps
            .iter()
            .filter(|b| b.path == m.path && b.offset == 0)
            .map(|b| b.start)
            .min()
        else {
            continue;
        };
        let bias = base.wrapping_sub(symbols.first_vaddr);
        let version = version_hex(pid, symbols.values.get("Py_Version").map(|v| v + bias))
            .or_else(|| version_in_name(name))
            .or_else(|| {
                let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
                version_in_name(&exe.file_name()?.to_string_lossy())
            })
            .ok_or_else(|| {
                Error::new(format!(
                    "process {pid} runs CPython from {}, but its version cannot be told",
                    m.path
                ))
            })?;
        let runtime = runtime + bias;
        // 3.13+: the build is what its own `_Py_DebugOffsets` says, else what its name says.
        let published = version_major_minor(&version)
            .filter(|&v| v >= (3, 13))
            .and_then(|_| {
                let mut flag = [0u8; 8];
                let at = runtime as usize + layouts::FREE_THREADED;
                Remote::new(pid).read_uncached(at, &mut flag).ok()?;
                Some(u64::from_le_bytes(flag) == 1)
            });
        let version = match published.unwrap_or_else(|| free_threaded(name)) {
            true if !version.ends_with('t') => format!("{version}t"),
            _ => version,
        };
        let mem = Remote::new(pid);
        let (layout, source) = interpreter::layout(&mem, &version, runtime as usize)
            .map_err(|why| Error::new(format!("process {pid}: {why}")))?;
        let symbol = |name: &str| symbols.values.get(name).map_or(0, |v| (v + bias) as usize);
        let types = Types {
            unicode: symbol("PyUnicode_Type"),
            bytes: symbol("PyBytes_Type"),
        };
        return Ok(Python {
            version,
            layout,
            unchecked: source == Source::Offsets,
            runtime,
            code_type: code_type + bias,
            types,
        });
    }
    if let Some((path, why)) = unread {
        return Err(Error::new(format!(
            "process {pid} maps {path}, but mlprof cannot read its symbols there: {why}"
        )));
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "?".to_string());
    Err(Error::new(format!(
        "process {pid} is not a CPython interpreter ({exe}; no _PyRuntime in its executable \
         or a libpython)"
    )))
}

struct Symbols {
    values: HashMap<String, u64>,
    first_vaddr: u64,
}

/// The symbols mlprof needs from an ELF file the target maps, read through the mapping's
/// inode where the kernel allows (`recording::mapped`: a checked regular file of at most
/// [`MAX_INTERPRETER_BYTES`], read in bounded pieces); else why not, in a few words.
fn elf_symbols(pid: u32, map: &MappedFile) -> std::result::Result<Symbols, String> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let opened = mapped::open_mapped(Some(pid), map, MAX_INTERPRETER_BYTES)?;
    let data = mapped::Bounded::new(opened.file);
    let file = object::File::parse(&data).map_err(|_| "not an ELF file".to_string())?;
    let wanted = [
        "_PyRuntime",
        "PyCode_Type",
        "Py_Version",
        "PyUnicode_Type",
        "PyBytes_Type",
    ];
    let mut values = HashMap::new();
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if let Ok(name) = sym.name() {
            if wanted.contains(&name) && sym.address() != 0 {
                values.entry(name.to_string()).or_insert(sym.address());
            }
        }
    }
    let first_vaddr = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    Ok(Symbols {
        values,
        first_vaddr,
    })
}

/// `Py_Version` (3.11+): `0xMMmmppXX`.
fn version_hex(pid: u32, addr: Option<u64>) -> Option<String> {
    let v = read_u32(&Remote::new(pid), addr? as usize)?;
    let (major, minor, micro) = (v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff);
    (major == 3).then(|| format!("{major}.{minor}.{micro}"))
}

/// `(3, 11)` of `3.11.7`.
fn version_major_minor(version: &str) -> Option<(u8, u8)> {
    interpreter::parse(version).map(|(major, minor, _)| (major, minor))
}

/// `3.11` from `python3.11`, `libpython3.11.so.1.0`.
fn version_in_name(name: &str) -> Option<String> {
    let rest = &name[name.find("python")? + "python".len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = digits.split('.').filter(|p| !p.is_empty());
    let major = parts.next()?;
    let minor = parts.next()?;
    Some(format!("{major}.{minor}"))
}

/// `python3.13t`, `libpython3.13t.so.1.0`: a free-threaded build.
fn free_threaded(name: &str) -> bool {
    name.find("python").is_some_and(|at| {
        name[at + "python".len()..]
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
            .starts_with('t')
    })
}

/// One read of the target's memory, to tell "not permitted" from the rest before sampling.
fn probe(pid: u32, addr: u64) -> Result<()> {
    match Remote::new(pid).read_uncached(addr as usize, &mut [0u8; 8]) {
        Ok(()) => Ok(()),
        Err(e) => match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Err(not_permitted(pid)),
            Some(libc::ESRCH) => Err(Error::new(format!("no such process: {pid}"))),
            _ => Err(Error::new(format!(
                "cannot read the memory of process {pid}: {e}"
            ))),
        },
    }
}

/// The kernel refused to let us read the process: what is needed, in one line.
fn not_permitted(pid: u32) -> Error {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .map(|s| s.trim().to_string());
    let how = match scope.as_deref() {
        Some("0") | None => String::new(),
        Some(n) => format!(
            "; kernel.yama.ptrace_scope is {n}, which allows it only to a parent or a privileged \
             user: `sudo sysctl kernel.yama.ptrace_scope=0` lifts that"
        ),
    };
    Error::new(format!(
        "not permitted to read the memory of process {pid}: attaching needs the right to ptrace \
         it (the same user, or CAP_SYS_PTRACE: `sudo mlprof attach {pid}`){how}"
    ))
}

/// Which of the kernel's clocks a thread's CPU time was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    /// `schedstat`: nanoseconds, exact.
    Schedstat,
    /// utime + stime of `stat`, in clock ticks (kernels without `schedstat`).
    Stat,
}

/// One thread as its `/proc/PID/task/TID` files show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Task {
    /// State letter (`R`, `S`, `D`, ...).
    state: char,
    /// When it started (clock ticks after boot): a thread id reused by a new thread has another.
    start: u64,
    /// Nanoseconds it has run.
    ran_ns: u64,
    /// Nanoseconds it has waited for a CPU (0 when the clock is `Stat`).
    queued_ns: u64,
    clock: Clock,
}

/// A thread's clocks at the previous look at it.
#[derive(Clone, Copy, Debug)]
struct Look {
    start: u64,
    ran_ns: u64,
    queued_ns: u64,
    clock: Clock,
}

impl Look {
    fn of(task: &Task) -> Look {
        Look {
            start: task.start,
            ran_ns: task.ran_ns,
            queued_ns: task.queued_ns,
            clock: task.clock,
        }
    }
}

/// The CPU time a thread used and the time it waited for a CPU since the previous look (ns),
/// or `None` when there is nothing to count: the first look of the attach (the clocks count
/// from there), or clocks that cannot be compared (read from another source, or a count that
/// went back). A thread not seen at the previous look started since: all it ran is in the
/// attach, and no more than the `wall_ns` since that look.
/// The stack a thread's CPU since its last look ran on, the look finding it on `stack` and
/// `asleep` or not: a thread found asleep ran before its wait began, so where the last look
/// found it running, if it did (the last milliseconds of a product are not the `time.sleep`
/// after it: charged to the sleep, a third of a 30 ms product's CPU and the BLAS pool's time
/// joined to it went there); else (it woke and slept again since) where it waits.
fn ran_at(
    running_at: &mut HashMap<u32, Vec<(u32, i32)>>,
    tid: u32,
    asleep: bool,
    stack: &[(u32, i32)],
) -> Vec<(u32, i32)> {
    if asleep {
        running_at.remove(&tid).unwrap_or_else(|| stack.to_vec())
    } else {
        if !stack.is_empty() {
            running_at.insert(tid, stack.to_vec());
        }
        stack.to_vec()
    }
}

fn since_last(
    previous: Option<&Look>,
    now: &Task,
    first: bool,
    wall_ns: u64,
) -> Option<(u64, u64)> {
    match previous {
        Some(p) if p.start == now.start => {
            (p.clock == now.clock && now.ran_ns >= p.ran_ns).then(|| {
                (
                    now.ran_ns - p.ran_ns,
                    now.queued_ns.saturating_sub(p.queued_ns),
                )
            })
        }
        _ if first => None,
        _ => Some((now.ran_ns.min(wall_ns), 0)),
    }
}

/// Every thread of `pid`, as listed in `/proc/PID/task` (`None` when that cannot be read), each
/// with what its files say: `None` where they could not be read (it exited meanwhile) or are
/// not what the kernel writes.
fn tasks(pid: u32, ns_per_tick: u64) -> Option<Vec<(u32, Option<Task>)>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        dir.flatten()
            .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
            .map(|tid| (tid, task(pid, tid, ns_per_tick)))
            .collect(),
    )
}

fn task(pid: u32, tid: u32, ns_per_tick: u64) -> Option<Task> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let (state, start, cpu_ticks) = parse_stat(&stat)?;
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| parse_schedstat(&s));
    let (ran_ns, queued_ns, clock) = match schedstat {
        Some((ran, queued)) => (ran, queued, Clock::Schedstat),
        None => (cpu_ticks.saturating_mul(ns_per_tick), 0, Clock::Stat),
    };
    Some(Task {
        state,
        start,
        ran_ns,
        queued_ns,
        clock,
    })
}

/// State letter, start time and utime + stime (clock ticks) of a `/proc/PID/task/TID/stat`.
fn parse_stat(stat: &str) -> Option<(char, u64, u64)> {
    // The name, in parentheses, may hold anything: the fields count from the last `)`.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    // Field 3 (state) is index 0: utime (14) and stime (15) are 11 and 12, starttime (22) 19.
    let state = fields.first()?.chars().next()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let start: u64 = fields.get(19)?.parse().ok()?;
    Some((state, start, utime.checked_add(stime)?))
}

/// Nanoseconds run and waited for a CPU, the first two fields of a `schedstat`.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// Whether `pid` has ended: gone from `/proc`, or a zombie. A read that fails for another reason
/// (mlprof out of file descriptors) says nothing about the process.
fn ended_now(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => matches!(
            parse_stat(&stat).map(|(state, _, _)| state),
            Some('Z' | 'X' | 'x')
        ),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => true,
        // `stat(2)` needs no descriptor.
        Err(_) => std::fs::symlink_metadata(format!("/proc/{pid}"))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound),
    }
}

/// This process's open-files limit, its soft limit raised to the hard one first (the hard limit
/// is the user's; the soft one a default): more threads can have a perf event.
fn open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit, which `limit` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    // The kernel refuses more than `fs.nr_open` (2^20 by default) even under an infinite limit.
    let wanted = limit.rlim_max.min(1 << 20);
    if limit.rlim_cur < wanted {
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit, which `raised` is.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    limit.rlim_cur
}

/// Why a thread could have no perf event while others had one.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shortage {
    /// File descriptors ran out (the open-files limit).
    Files,
    /// The locked memory perf allows for the events' rings ran out.
    Memory,
    /// The kernel refused this thread's (the error, in words).
    Refused(String),
}

/// The perf events on the target's threads: one per thread that runs, opened when it is first
/// seen or found to have run without one, closed when it ends or, when room is short, handed
/// on from a thread that has not run for a look to one that runs.
struct Perf {
    events: HashMap<u32, ThreadIps>,
    /// Looks so far ([`Perf::keep`] counts them).
    look: u64,
    /// The look at which each thread with an event last ran (or got it).
    last_ran: HashMap<u32, u64>,
    /// Most events held at once: what the open-files limit leaves after the descriptors mlprof
    /// holds and those it needs otherwise; lowered when the kernel says less is left.
    room: usize,
    /// The open-files limit.
    limit: u64,
    /// Why the kernel refuses events at all (then none is tried again).
    refused: Option<String>,
    /// Whether any event was opened.
    opened: bool,
    /// Threads whose event the kernel refused when others had theirs (not tried again).
    denied: HashSet<u32>,
    /// Threads that ended before their event could be opened (`ESRCH`; not tried again).
    exited: HashSet<u32>,
    /// What ran out, the last time something did.
    short_of: Option<Shortage>,
    /// Threads that ran with no event while events were had: their running time is Python.
    without: BTreeSet<u32>,
    /// Threads that ran.
    ran: BTreeSet<u32>,
}

impl Perf {
    fn new(limit: u64) -> Perf {
        let open = std::fs::read_dir("/proc/self/fd").map_or(8, |d| d.count() as u64);
        Perf {
            events: HashMap::new(),
            look: 0,
            last_ran: HashMap::new(),
            room: limit
                .saturating_sub(open + SPARE_FDS)
                .min(MAX_EVENTS as u64) as usize,
            limit,
            refused: None,
            opened: false,
            denied: HashSet::new(),
            exited: HashSet::new(),
            short_of: None,
            without: BTreeSet::new(),
            ran: BTreeSet::new(),
        }
    }

    /// Whether thread `tid` has an event.
    fn has(&self, tid: u32) -> bool {
        self.events.contains_key(&tid)
    }

    /// Whether thread `tid` has an event, opening one if it has none: in the room left, or
    /// else in that of the thread that has run least lately, if it did not run at this look or
    /// the previous.
    fn open(&mut self, tid: u32) -> bool {
        if self.events.contains_key(&tid) {
            return true;
        }
        if self.refused.is_some() || self.denied.contains(&tid) || self.exited.contains(&tid) {
            return false;
        }
        if self.events.len() >= self.room {
            let idle = self
                .events
                .keys()
                .map(|t| (self.last_ran.get(t).copied().unwrap_or(0), *t))
                .min()
                .filter(|&(last, _)| last + 1 < self.look);
            match idle {
                Some((_, t)) => {
                    self.events.remove(&t);
                    self.last_ran.remove(&t);
                }
                None => {
                    self.short_of.get_or_insert(Shortage::Files);
                    return false;
                }
            }
        }
        let err = match ThreadIps::open(tid, PERF_PERIOD_NS) {
            Ok(event) => {
                self.events.insert(tid, event);
                self.last_ran.insert(tid, self.look);
                self.opened = true;
                return true;
            }
            Err(err) => err,
        };
        match (&err, err.errno()) {
            // It exited meanwhile: the others are sampled as before.
            (_, Some(libc::ESRCH)) => {
                self.exited.insert(tid);
            }
            (OpenError::Open(_), Some(libc::EMFILE | libc::ENFILE)) => {
                self.room = self.events.len();
                self.short_of = Some(Shortage::Files);
            }
            (OpenError::Map(_), Some(libc::EPERM | libc::ENOMEM | libc::EAGAIN)) => {
                self.room = self.events.len();
                self.short_of = Some(Shortage::Memory);
            }
            _ if self.opened => {
                self.denied.insert(tid);
                self.short_of = Some(Shortage::Refused(err.to_string()));
            }
            _ => {
                let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
                let seccomp = std::fs::read_to_string("/proc/self/status")
                    .ok()
                    .and_then(|s| {
                        let line = s.lines().find(|l| l.starts_with("Seccomp:"))?;
                        line["Seccomp:".len()..].trim().parse().ok()
                    });
                // SAFETY: geteuid has no preconditions.
                let root = unsafe { libc::geteuid() } == 0;
                self.refused = Some(refusal(&err, paranoid, seccomp, root));
            }
        }
        false
    }

    /// The instruction pointers thread `tid`'s event recorded since the last call.
    fn drain(&mut self, tid: u32, out: &mut Vec<u64>) {
        if let Some(event) = self.events.get_mut(&tid) {
            event.drain(out);
        }
    }

    /// A new look: close the events of the threads not `listed` (they ended).
    fn keep(&mut self, listed: &HashSet<u32>) {
        self.look += 1;
        self.events.retain(|tid, _| listed.contains(tid));
        self.last_ran.retain(|tid, _| listed.contains(tid));
        self.denied.retain(|tid| listed.contains(tid));
        self.exited.retain(|tid| listed.contains(tid));
    }

    /// Thread `tid` ran; `with_event`: while it had one.
    fn ran(&mut self, tid: u32, with_event: bool) {
        self.ran.insert(tid);
        if with_event {
            self.last_ran.insert(tid, self.look);
        }
        if !with_event && self.refused.is_none() && !self.exited.contains(&tid) {
            self.without.insert(tid);
        }
    }

    /// What the report must say about the events.
    fn warnings(&self) -> Vec<String> {
        if let Some(why) = &self.refused {
            return vec![format!(
                "Python and native time are not told apart: perf events on the process's \
                 threads were refused ({why}), so its running time counts as Python"
            )];
        }
        let Some(short_of) = self.short_of.as_ref().filter(|_| !self.without.is_empty()) else {
            return Vec::new();
        };
        let why = match short_of {
            Shortage::Refused(e) => format!("the kernel refused theirs: {e}"),
            Shortage::Memory => format!(
                "the locked memory perf allows for their rings was spent \
                 (kernel.perf_event_mlock_kb is {}, and the memlock limit)",
                std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb")
                    .map_or("unknown".to_string(), |s| s.trim().to_string())
            ),
            Shortage::Files => format!(
                "the open-files limit ({}) left room for {} at once",
                self.limit, self.room
            ),
        };
        vec![format!(
            "Python and native time are told apart for only some threads: {} of the {} that ran \
             had no perf event for some of their time ({why}); that time counts as Python",
            self.without.len(),
            self.ran.len()
        )]
    }
}

/// Why the kernel refused a perf event, in words: from the error and what this machine says
/// (`paranoid`: `kernel.perf_event_paranoid`; `seccomp`: this process's `Seccomp:` mode in
/// `/proc/self/status`, 2 for a filter; `root`: mlprof's effective user).
fn refusal(err: &OpenError, paranoid: Option<i32>, seccomp: Option<u32>, root: bool) -> String {
    let filtered = seccomp == Some(2);
    let paranoid_text = paranoid.map_or("unknown".to_string(), |p| p.to_string());
    match err.errno() {
        Some(libc::EACCES | libc::EPERM | libc::ENOSYS) if filtered => format!(
            "{err}: mlprof runs under a seccomp filter (a container's, most likely) that \
             refuses perf_event_open; the container's seccomp profile must allow it"
        ),
        Some(libc::EACCES | libc::EPERM) if !root && paranoid.is_some_and(|p| p > 2) => format!(
            "{err}: kernel.perf_event_paranoid is {paranoid_text}, which refuses it to users \
             without CAP_PERFMON; `sudo sysctl kernel.perf_event_paranoid=2` allows it \
             (user space only), as does running mlprof as root"
        ),
        Some(libc::EACCES | libc::EPERM) => format!(
            "{err}, although kernel.perf_event_paranoid ({paranoid_text}) allows it: a security \
             module (SELinux, AppArmor) or the kernel's lockdown refuses it"
        ),
        Some(libc::ENOSYS) => format!(
            "{err}: this kernel has no perf events (built without them, or a sandbox that does \
             not offer them)"
        ),
        Some(libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP | libc::EINVAL) => {
            format!("{err}: this kernel does not offer the software CPU-clock event")
        }
        _ => err.to_string(),
    }
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn ppid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = &s[s.rfind(')')? + 1..];
            after.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_file_names() {
        assert_eq!(version_in_name("python3.11").as_deref(), Some("3.11"));
        assert_eq!(
            version_in_name("libpython3.9.so.1.0").as_deref(),
            Some("3.9")
        );
        assert_eq!(version_in_name("python3"), None);
        assert_eq!(version_in_name("python"), None);
        assert!(free_threaded("python3.13t") && free_threaded("libpython3.13t.so.1.0"));
        assert!(!free_threaded("python3.13") && !free_threaded("libpython3.11.so.1.0"));
    }

    fn task(ran_ns: u64, start: u64) -> Task {
        Task {
            state: 'R',
            start,
            ran_ns,
            queued_ns: 0,
            clock: Clock::Schedstat,
        }
    }

    #[test]
    fn a_thread_counts_the_cpu_it_used_since_the_previous_look() {
        let before = Look::of(&task(1_000, 7));
        assert_eq!(
            since_last(Some(&before), &task(4_000, 7), false, 10_000),
            Some((3_000, 0))
        );
        // Runnable all along but never on a CPU: no CPU, whatever the wall time.
        assert_eq!(
            since_last(Some(&before), &task(1_000, 7), false, 10_000),
            Some((0, 0))
        );
        // The first look sets the clocks; a count that went back or changed clock counts
        // nothing.
        assert_eq!(since_last(None, &task(4_000, 7), true, 10_000), None);
        assert_eq!(
            since_last(Some(&before), &task(500, 7), false, 10_000),
            None
        );
        let mut ticks = task(4_000, 7);
        ticks.clock = Clock::Stat;
        assert_eq!(since_last(Some(&before), &ticks, false, 10_000), None);
        // Born since the previous look (or a reused id): all it ran, at most the time since.
        assert_eq!(
            since_last(None, &task(4_000, 9), false, 10_000),
            Some((4_000, 0))
        );
        assert_eq!(
            since_last(Some(&before), &task(40_000, 9), false, 10_000),
            Some((10_000, 0))
        );
    }

    #[test]
    fn proc_files_that_make_no_sense_are_skipped() {
        let stat = "4242 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 3 0 777 0 0";
        assert_eq!(parse_stat(stat), Some(('R', 777, 175)));
        for bad in [
            "",
            "4242 (a",
            "4242 (a) R 1 2",
            "4242 (a) R 1 2 3 4 5 6 7 8 9 10 x 25 0 0 20 0 3 0 777",
            "4242 (a) R 1 2 3 4 5 6 7 8 9 10 18446744073709551615 1 0 0 20 0 3 0 7",
        ] {
            assert_eq!(parse_stat(bad), None, "{bad}");
        }
        assert_eq!(parse_schedstat("123 456 7\n"), Some((123, 456)));
        assert_eq!(parse_schedstat("123"), None);
        assert_eq!(parse_schedstat("-1 2 3"), None);
    }

    #[test]
    fn a_process_ends_when_proc_says_so() {
        assert!(!ended_now(std::process::id()));
        assert!(ended_now(4_194_303)); // above the largest pid the kernel gives
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let zombie = std::time::Instant::now();
        // Not waited for: a zombie once it exits.
        while !ended_now(child.id()) {
            assert!(zombie.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = child.wait();
    }

    /// Events on this process's own threads: one that ended is closed, one that is gone
    /// before its event is opened turns nothing off, and the room is kept to.
    #[test]
    fn events_come_and_go_with_their_threads() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let mut perf = Perf::new(1024);
        if !perf.open(me) {
            eprintln!(
                "perf events not permitted here ({:?}); nothing to check",
                perf.refused
            );
            return;
        }
        // A thread that ends: its event opens while it lives and closes once it is not listed.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: as above.
            tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as u32)
                .unwrap();
            let _ = done_rx.recv();
        });
        let other = rx.recv().unwrap();
        assert!(perf.open(other));
        assert_eq!(perf.events.len(), 2);
        drop(done_tx);
        worker.join().unwrap();
        perf.keep(&HashSet::from([me]));
        assert_eq!(perf.events.len(), 1, "the ended thread's event is closed");
        // Gone before its event was opened (ESRCH): skipped, nothing refused, nothing to say.
        assert!(!perf.open(other));
        assert!(perf.refused.is_none() && perf.short_of.is_none());
        perf.ran(other, false);
        assert!(perf.warnings().is_empty(), "{:?}", perf.warnings());
        // No room: the thread runs without an event, and the warning says why.
        perf.room = 1;
        let third = i32::MAX as u32; // no thread has this id
        assert!(!perf.open(third));
        perf.ran(third, false);
        let said = perf.warnings().join(" ");
        assert!(
            said.contains("1 of the 2 that ran") && said.contains("open-files limit (1024)"),
            "{said}"
        );
        // A look later this thread has not run for a whole look: its event goes to one that
        // runs (here one that ended meanwhile, so that none is left).
        perf.keep(&HashSet::from([me, third]));
        perf.keep(&HashSet::from([me, third]));
        assert!(!perf.open(third));
        assert!(
            perf.events.is_empty(),
            "the idle thread's event was handed on"
        );
    }

    #[test]
    fn a_refusal_names_its_cause() {
        let open = |errno| OpenError::Open(std::io::Error::from_raw_os_error(errno));
        let says = |errno, paranoid, seccomp, root| {
            refusal(&open(errno), Some(paranoid), Some(seccomp), root)
        };
        assert!(says(libc::EPERM, 2, 2, false).contains("seccomp filter"));
        assert!(says(libc::ENOSYS, 2, 2, true).contains("seccomp filter"));
        let paranoid = says(libc::EACCES, 3, 0, false);
        assert!(paranoid.contains("perf_event_paranoid is 3"), "{paranoid}");
        // As root, or where the setting allows it, the setting is not the cause.
        for (p, root) in [(3, true), (2, false), (-1, false)] {
            let other = says(libc::EACCES, p, 0, root);
            assert!(
                other.contains("security module") && !other.contains("sysctl"),
                "{other}"
            );
        }
        let none = says(libc::ENOSYS, 2, 0, false);
        assert!(
            none.contains("no perf events") && !none.contains("paranoid"),
            "{none}"
        );
        let no_event = says(libc::ENOENT, 2, 0, false);
        assert!(no_event.contains("does not offer"), "{no_event}");
    }

    /// A real libpython, renamed as a version mlprof has no layout for, mapped (as far as
    /// `find_python` knows) in this process.
    #[test]
    fn a_version_without_a_layout_is_refused_by_name() {
        let home = std::env::var_os("PYENV_ROOT")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".pyenv"))
            })
            .unwrap_or_default();
        let Some(lib) = std::fs::read_dir(home.join("versions"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|v| v.path().join("lib/libpython3.9.so.1.0"))
            .find(|p| p.exists())
        else {
            crate::test_skip::skipped("skipped: no libpython3.9.so under pyenv to rename");
            return;
        };
        let dir = std::env::temp_dir().join(format!("mlprof-attach-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let renamed = dir.join("libpython3.8.so.1.0");
        std::fs::copy(&lib, &renamed).unwrap();
        let maps = [MappedFile {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0010_0000,
            offset: 0,
            path: renamed.display().to_string(),
            executable: false,
            dev: 0,
            inode: 0,
        }];
        let err = find_python(std::process::id(), &maps)
            .err()
            .map(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let err = err.expect("refused");
        assert!(
            err.contains(&format!(
                "runs CPython 3.8, which mlprof cannot read (it reads {})",
                interpreter::supported()
            )),
            "{err}"
        );
    }
}
