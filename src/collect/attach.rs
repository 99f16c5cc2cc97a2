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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mlprof_pyframes::{layouts, walk, Interpreter};
use mlprof_wire::{python_status, sample_flags};

use super::decode::Decoded;
use super::perf::ThreadIps;
use super::remote::Remote;
use super::{monotonic_ns, procfs, waits};
use crate::error::{Error, Result};
use crate::launch::ChildExit;
use crate::recording::maps::{library_name, MappedFile};
use crate::recording::{ChannelSummary, CpuSample, ProcSummary, Recording, Tick};

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
    /// `3.11.7` (or `3.11` when only the file name tells).
    version: String,
    layout: &'static layouts::Layout,
    runtime: u64,
    code_type: u64,
}

/// CPU time between two instruction pointers perf records on a thread: the newest one when a
/// round reads the thread's stack is at most this old.
const PERF_PERIOD_NS: u64 = 500_000;
/// Deepest stack read.
const MAX_DEPTH: usize = 128;
/// Most threads of the interpreter looked at.
const MAX_THREADS: usize = 512;
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
        layout: python.layout,
        code_type: python.code_type as usize,
    };
    // An address in the interpreter's code, for CPU time where no instruction pointer was
    // sampled (perf events not permitted): it counts as Python.
    let interpreter_ip = maps
        .iter()
        .find(|m| m.executable && is_python_file(library_name(&m.path)))
        .map_or(0, |m| m.start);
    let mut decoded = Decoded::default();
    let mut perf: HashMap<u32, ThreadIps> = HashMap::new();
    let mut perf_refused: Option<std::io::Error> = None;
    let mut looks: HashMap<u32, Look> = HashMap::new();
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
        let Some(reading) = procfs::read(pid, round.is_multiple_of(5), false) else {
            ended = true;
            break;
        };
        proc_summary.peak_rss_bytes = proc_summary.peak_rss_bytes.max(reading.hwm_bytes);
        proc_summary.cpu_s = reading.cpu_s;
        ticks.push(Tick {
            t_ns: now,
            heap_bytes: 0,
            rss_bytes: reading.rss_bytes,
            mapped_bytes: 0,
            anon_bytes: reading.anon_bytes,
        });
        if !looked {
            usage_before = procfs::usage(pid).unwrap_or(usage_before);
        }
        if let Some(all) = tasks(pid, ns_per_tick) {
            let wall_delta = now_abs - last_wall;
            last_wall = now_abs;
            // Its reads are cached by block: a fresh one each round sees the threads as they are.
            let mem = Remote::new(pid);
            let n = walk::threads(&mem, python.layout, python.runtime as usize, &mut states);
            // The threads that ended: their clocks forgotten.
            looks.retain(|tid, _| all.iter().any(|&(t, _)| t == *tid));
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
                if perf_refused.is_none() && !perf.contains_key(&tid) {
                    match ThreadIps::open(tid, PERF_PERIOD_NS) {
                        Ok(p) => {
                            perf.insert(tid, p);
                        }
                        Err(e) => perf_refused = Some(e),
                    }
                }
                ips.clear();
                if let Some(p) = perf.get_mut(&tid) {
                    p.drain(&mut ips);
                }
                let previous = looks.insert(tid, Look::of(&task));
                let Some((cpu_ns, queued_ns)) =
                    since_last(previous.as_ref(), &task, !looked, wall_delta)
                else {
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
                        let w = walk::walk(&mem, &interp, tstate, &mut frames);
                        frames[..w.depth]
                            .iter()
                            .map(|f| {
                                let id = waits::code_id(&mem, python.layout, f.code, &mut decoded);
                                (id, f.lasti)
                            })
                            .collect()
                    }
                    None => Vec::new(),
                };
                if cpu_ns > 0 {
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
                        frames: stack.clone(),
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
    drop(perf);
    let usage_after = procfs::usage(pid).unwrap_or(usage_before);
    let usage = crate::launch::Usage {
        user_s: (usage_after.0 - usage_before.0).max(0.0),
        kernel_s: (usage_after.1 - usage_before.1).max(0.0),
        maxrss_bytes: proc_summary.peak_rss_bytes,
    };
    let mut warnings = vec![format!(
        "attached to process {pid} for {:.1} s{}: CPU and waiting per line from its threads' \
         stacks, read from outside {} times a second, and RSS from /proc; memory per line, \
         the heap and copies are not measured in attach mode (they need `mlprof run`)",
        wall_ns as f64 / 1e9,
        if ended { " (it ended meanwhile)" } else { "" },
        opts.rate_hz
    )];
    if let Some(e) = perf_refused {
        warnings.push(format!(
            "Python and native time are not told apart: perf events on the process's threads \
             were refused ({e}; kernel.perf_event_paranoid is {}), so its running time counts \
             as Python",
            std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map_or("unknown".to_string(), |s| s.trim().to_string())
        ));
    }
    let command = cmdline(pid);
    let ppid = ppid(pid);
    let samples = std::mem::take(&mut decoded.samples);
    let channel = ChannelSummary {
        pid,
        ppid,
        start_ns: 0,
        command: command.clone(),
        python: Some(python.version.clone()),
        python_status: python_status::WALKED,
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
    for m in maps {
        let name = library_name(&m.path);
        if !is_python_file(name) || seen.contains(&m.path) {
            continue;
        }
        seen.push(m.path.clone());
        let Some(symbols) = elf_symbols(pid, &m.path) else {
            continue;
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
        let mut parts = version.split('.');
        let (major, minor) = (
            parts.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            parts.next().and_then(|p| p.parse().ok()).unwrap_or(0),
        );
        let layout = layouts::for_version(major, minor).ok_or_else(|| {
            Error::new(format!(
                "process {pid} runs CPython {version}, which mlprof cannot read (it reads \
                 CPython 3.9 to 3.13)"
            ))
        })?;
        if free_threaded(name) {
            return Err(Error::new(format!(
                "process {pid} runs a free-threaded CPython {version} ({name}), which mlprof \
                 cannot read"
            )));
        }
        return Ok(Python {
            version,
            layout,
            runtime: runtime + bias,
            code_type: code_type + bias,
        });
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

/// The symbols mlprof needs from an ELF file the target maps (read through the target's
/// root, for a process in a container).
fn elf_symbols(pid: u32, path: &str) -> Option<Symbols> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let data = std::fs::read(format!("/proc/{pid}/root{path}"))
        .or_else(|_| std::fs::read(path))
        .ok()?;
    let file = object::File::parse(&*data).ok()?;
    let wanted = ["_PyRuntime", "PyCode_Type", "Py_Version"];
    let mut values = HashMap::new();
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if let Ok(name) = sym.name() {
            if wanted.contains(&name) && sym.address() != 0 {
                values.entry(name.to_string()).or_insert(sym.address());
            }
        }
    }
    let first_vaddr = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    Some(Symbols {
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
            eprintln!("skipped: no libpython3.9.so under pyenv to rename");
            return;
        };
        let dir = std::env::temp_dir().join(format!("mlprof-attach-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let renamed = dir.join("libpython3.14.so.1.0");
        std::fs::copy(&lib, &renamed).unwrap();
        let maps = [MappedFile {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0010_0000,
            offset: 0,
            path: renamed.display().to_string(),
            executable: false,
        }];
        let err = find_python(std::process::id(), &maps)
            .err()
            .map(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let err = err.expect("refused");
        assert!(
            err.contains(
                "runs CPython 3.14, which mlprof cannot read (it reads CPython 3.9 to 3.13)"
            ),
            "{err}"
        );
    }
}
