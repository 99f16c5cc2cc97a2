//! Recording → Profile: group channels into processes, build the footprint summary, fill the
//! contract. Pure: no I/O, no clocks.

use std::collections::{BTreeMap, HashMap};

use super::filter::Filter;
use super::profile::*;
use super::timeline;
use crate::recording::{ChannelSummary, Recording};
use crate::symbolize::NativeNames;

const NS: f64 = 1e9;

/// Build the profile of a run. `natives` names the sampled instruction pointers; `filter`
/// says which files lines are attributed to.
pub fn attribute(rec: &Recording, natives: &NativeNames, filter: &Filter) -> Profile {
    let processes = processes(rec);
    let mut warnings = rec.warnings.clone();
    warnings.extend(python_warnings(rec));
    warnings.extend(death_note(rec));
    let mut places = std::collections::HashMap::new();
    let tree: std::collections::BTreeSet<u32> = processes.iter().map(|p| p.pid).collect();
    let mut gpu_join = super::gpu::Joiner::new(&rec.gpu, &tree);
    let sample_places = super::cpu::places(rec, filter);
    let counted = super::idle::counted(rec, filter, &sample_places);
    let donors = super::pooljoin::donors(rec, &sample_places);
    let threads = super::cpu::add(
        rec,
        natives,
        &sample_places,
        &donors,
        &counted,
        &mut places,
        &mut gpu_join,
    );
    gpu_join.finish(&mut places);
    let (mut gpu, gpu_peaks) = super::gpu::summary(&rec.gpu, &tree);
    let mut processes = processes;
    for p in &mut processes {
        p.peak_gpu_memory_bytes = gpu_peaks.get(&p.pid).copied().unwrap_or(0);
    }
    if !filter.idle {
        for (ci, c) in rec.channels.iter().enumerate() {
            let waited: u64 = super::idle::launcher_waits(rec, ci)
                .iter()
                .map(|w| w.1)
                .sum();
            if let Some(p) = processes.iter_mut().find(|p| p.pid == c.pid) {
                p.waiting_for_children_s += waited as f64 / NS;
            }
        }
    }
    super::memory::add(rec, filter, &sample_places, &donors, &mut places);
    let mut gpu_calls = super::gpu_calls::add(rec, filter, &sample_places, &mut places);
    for p in &mut processes {
        p.gpu_calls = gpu_calls.remove(&p.pid);
        // A process NVML saw but whose calls were not seen has no totals to add.
        if let Some(calls) = p
            .gpu_calls
            .as_ref()
            .filter(|c| c.totals != GpuLineCalls::default())
        {
            gpu.calls
                .get_or_insert_with(GpuLineCalls::default)
                .add(&calls.totals);
        }
    }
    let mut tensors = super::gpu_tensors::add(rec, filter, &sample_places, &mut places);
    for p in &mut processes {
        p.gpu_tensors = tensors.remove(&p.pid);
    }
    let (lines, functions) = super::places::summarise(places, rec.wall_ns);
    let (stack_frames, stacks, samples) = super::stacks::build(rec, natives, &counted, &donors);
    if !processes
        .iter()
        .any(|p| p.pid == rec.child_pid && p.instrumented)
    {
        warnings.push(format!(
            "the preload library was not loaded into process {} (statically linked, or \
             LD_PRELOAD cleared): only RSS and CPU time were measured",
            rec.child_pid
        ));
    }
    let ranks = super::ranks::of_run(rec, natives, filter, &processes);
    let mut profile = Profile {
        schema: SCHEMA.to_string(),
        command: rec.command.clone(),
        exit: Exit {
            code: rec.exit.code,
            signal: rec.exit.signal,
        },
        wall_s: rec.wall_ns as f64 / NS,
        cpu_user_s: rec.exit.usage.user_s,
        cpu_kernel_s: rec.exit.usage.kernel_s,
        // Attached, the rows count from the target's start, not from the attach: nothing is
        // left unreaped.
        cpu_unreaped_s: match rec.setup.attached {
            true => 0.0,
            false => (processes.iter().map(|p| p.cpu_s).sum::<f64>()
                - rec.exit.usage.user_s
                - rec.exit.usage.kernel_s)
                .max(0.0),
        },
        memory: memory(rec, &processes),
        processes,
        gpu,
        cpu_timeline: timeline::cpu(rec, natives, &counted),
        lines,
        functions,
        samples,
        stack_frames,
        stacks,
        threads,
        sample_interval_s: rec
            .channels
            .iter()
            .map(|c| c.sample_interval_ns)
            .max()
            .unwrap_or(0) as f64
            / NS,
        memory_sample_bytes: rec.setup.memory_sample_bytes,
        copy_sample_bytes: rec.setup.copy_sample_bytes,
        cpus: rec.setup.cpus,
        profiler: crate::model::ProfilerCpu {
            cpu_s: rec.profiler.cpu_ns as f64 / NS,
            proc_reads_s: rec.profiler.proc_reads_ns as f64 / NS,
            waits_s: rec.profiler.waits_ns as f64 / NS,
        },
        hints: Vec::new(),
        cpu_samples: rec
            .channels
            .iter()
            .flat_map(|c| &c.samples)
            .filter(|s| s.flags & mlprof_wire::sample_flags::WAITING == 0)
            .count() as u64
            + rec
                .channels
                .iter()
                .map(|c| c.merged_cpu_samples)
                .sum::<u64>(),
        event_window_s: rec.channels.iter().map(|c| c.window_ns).max().unwrap_or(0) as f64 / NS,
        idle: if filter.idle { Idle::All } else { Idle::Main },
        dropped_events: rec.channels.iter().map(|c| c.dropped).sum(),
        labels: rec.labels.clone(),
        violations: Vec::new(),
        warnings,
        ranks,
        stragglers: Vec::new(),
        memory_imbalance: Vec::new(),
        regions: super::regions::summarize(rec, natives, filter),
        attached: rec.setup.attached,
    };
    super::ranks::compare(&mut profile);
    profile
}

/// One process per pid: exec'd images of the same pid are merged (the last image names it).
fn processes(rec: &Recording) -> Vec<Process> {
    let mut by_pid: BTreeMap<u32, Vec<&ChannelSummary>> = BTreeMap::new();
    for channel in &rec.channels {
        by_pid.entry(channel.pid).or_default().push(channel);
    }
    by_pid.entry(rec.child_pid).or_default();
    let mut out: Vec<Process> = by_pid
        .iter()
        .map(|(&pid, images)| process(rec, pid, images))
        .collect();
    out.sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.pid.cmp(&b.pid)));
    out
}

fn process(rec: &Recording, pid: u32, images: &[&ChannelSummary]) -> Process {
    let first = images.first();
    let last = images.last();
    let proc_stats = rec.procs.iter().find(|p| p.pid == pid);
    let mut peak_rss = proc_stats.map_or(0, |p| p.peak_rss_bytes);
    let mut exit = Exit {
        code: last.and_then(|l| l.exit_code),
        signal: None,
    };
    // `/proc`'s last reading of a process the collector does not reap comes up to a tick
    // before its end, later still on a loaded machine; its threads' samples hold their CPU to
    // the end (each sends what it used after its last sample when it ends).
    let sampled_ns: u64 = images.iter().map(|i| i.sampled_cpu_ns()).sum();
    let mut cpu_s = proc_stats
        .map_or(0.0, |p| p.cpu_s)
        .max(sampled_ns as f64 / NS);
    if pid == rec.child_pid {
        exit = Exit {
            code: rec.exit.code,
            signal: rec.exit.signal,
        };
        peak_rss = peak_rss.max(rec.exit.usage.maxrss_bytes);
        if proc_stats.is_none() {
            cpu_s = rec.exit.usage.user_s + rec.exit.usage.kernel_s; // never read: best we have
        }
    }
    Process {
        pid,
        ppid: first.map_or(0, |f| f.ppid),
        command: last.map_or_else(|| rec.command.clone(), |l| l.command.clone()),
        exit,
        // Identity is the last image's: a subprocess child is a fork of Python that then runs
        // `sh`, and it is `sh`. A fork image that went on to exec counts its own growth only
        // (its inherited heap was the parent's, gone at the exec).
        python: last.and_then(|l| l.python.clone()),
        python_layout: last.and_then(|l| match l.python_status {
            mlprof_wire::python_status::WALKED => Some("table".to_string()),
            mlprof_wire::python_status::WALKED_OFFSETS => Some("interpreter".to_string()),
            _ => None,
        }),
        peak_heap_bytes: images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                let peak = image.heap_peak.max(0) as u64;
                if image.forked && i + 1 < images.len() {
                    peak.saturating_sub(image.inherited_heap)
                } else {
                    peak
                }
            })
            .max()
            .unwrap_or(0),
        peak_rss_bytes: peak_rss,
        alloc_bytes: images.iter().map(|i| i.alloc_bytes).sum(),
        alloc_count: images.iter().map(|i| i.alloc_count).sum(),
        cpu_s,
        start_s: first.map_or(0.0, |f| f.start_ns as f64 / NS),
        python_start_s: images
            .iter()
            .find(|i| i.python.is_some())
            .map(|i| i.start_ns as f64 / NS),
        instrumented: !images.is_empty(),
        forked: last.is_some_and(|l| l.forked),
        inherited_heap_bytes: last.filter(|l| l.forked).map_or(0, |l| l.inherited_heap),
        peak_mapped_bytes: images.iter().map(|i| i.mapped.peak).max().unwrap_or(0),
        peak_gpu_memory_bytes: 0, // from the GPU polls, in `attribute`
        gpu_calls: None,          // from the CUDA calls, in `attribute`
        gpu_tensors: None,        // from the allocator's trace, in `attribute`
        still_running: last.is_some_and(|l| l.still_running),
        local_rank: last.and_then(|l| l.rank).and_then(|r| r.local_rank),
        waiting_for_children_s: 0.0, // from the launcher waits, in `attribute`
        peak_busy_threads: images
            .iter()
            .map(|i| peak_busy_threads(i))
            .max()
            .unwrap_or(0),
        rank: last
            .and_then(|l| l.rank)
            .map(|r| format!("rank {}", r.rank)),
    }
}

/// Stretches of time busy threads are counted in.
const BUSY_BUCKET_NS: u64 = 250_000_000;

/// Most threads of a process image busy at once: per 250 ms stretch, the threads whose CPU
/// samples and, where they have any, time waiting for a CPU (the kernel's run-queue delay)
/// there add up to a tenth of it at least (eight threads sharing two CPUs get a quarter each; on a machine loaded
/// beyond its cores by other programs they get less CPU, and wait in the run queue for the
/// rest), in the second busiest stretch (so that the hand-over from one pool to the next,
/// both in one stretch, is not taken for both at once). Merged old samples (windows wider
/// than a stretch) are counted in stretches of their window.
fn peak_busy_threads(image: &ChannelSummary) -> u32 {
    let bucket = BUSY_BUCKET_NS.max(image.window_ns);
    let mut cpu: HashMap<(u64, u32), u64> = HashMap::new();
    for s in image
        .samples
        .iter()
        .filter(|s| s.flags & mlprof_wire::sample_flags::WAITING == 0)
    {
        *cpu.entry((s.t_ns / bucket, s.tid)).or_default() += s.weight_ns;
    }
    // Queued only where the thread ran too (a CPU sample there): a thread woken often for
    // little work queues a little at each wake-up on a loaded machine, and is not busy.
    for &(t_ns, tid, ns) in &image.queued {
        if let Some(busy) = cpu.get_mut(&(t_ns / bucket, tid)) {
            *busy += ns;
        }
    }
    let mut busy: HashMap<u64, u32> = HashMap::new();
    for ((b, _), ns) in cpu {
        if ns >= bucket / 10 {
            *busy.entry(b).or_default() += 1;
        }
    }
    let mut counts: Vec<u32> = busy.into_values().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts.get(1).copied().unwrap_or(0)
}

/// Tree peak: each process's exact peak, or the highest sampled sum when several processes
/// overlapped; its time is that of the moment its holders are taken at (a single process's
/// last peak mark), else when the collector first saw it.
fn memory(rec: &Recording, processes: &[Process]) -> Memory {
    let super::memory::TreePeak {
        bytes: peak,
        at_ns,
        heap_at_ns,
        ..
    } = super::memory::tree_peak(rec);
    let tick_rss = rec.ticks.iter().map(|t| t.rss_bytes).max().unwrap_or(0);
    let proc_rss = processes
        .iter()
        .map(|p| p.peak_rss_bytes)
        .max()
        .unwrap_or(0);
    let unaccounted_bytes = rec
        .ticks
        .iter()
        .max_by_key(|t| t.rss_bytes)
        .map_or(0, |t| t.rss_bytes.saturating_sub(t.counted_bytes()));
    let counted_at_tick = rec
        .ticks
        .iter()
        .map(|t| t.counted_bytes())
        .max()
        .unwrap_or(0);
    Memory {
        peak_counted_bytes: counted_at_tick.max(peak),
        unaccounted_bytes,
        peak_mapped_bytes: processes.iter().map(|p| p.peak_mapped_bytes).sum(),
        peak_heap_bytes: peak,
        peak_rss_bytes: tick_rss.max(proc_rss),
        peak_at_s: heap_at_ns as f64 / NS,
        held_at_s: Some(at_ns as f64 / NS),
        timeline: timeline::build(&rec.ticks, timeline::MAX_POINTS),
    }
}

/// One warning per distinct reason Python frames could not be walked.
fn python_warnings(rec: &Recording) -> Vec<String> {
    use mlprof_wire::python_status as status;
    let mut out: Vec<String> = Vec::new();
    for c in &rec.channels {
        let why = match c.python_status {
            status::UNSUPPORTED_VERSION => {
                "this CPython build has no supported layout (a debug build, or a version older \
                 than mlprof reads)"
            }
            status::FREE_THREADED => "this free-threaded CPython build cannot be read",
            status::OFFSETS_MISMATCH => {
                "the interpreter's self-description (_Py_DebugOffsets) is not one mlprof can \
                 read"
            }
            status::CHECK_PENDING => {
                "the layout its _Py_DebugOffsets gives (a version newer than mlprof knows) \
                 could not be checked: no Python stack was seen"
            }
            status::CHECK_FAILED => {
                "the layout its _Py_DebugOffsets gives (a version newer than mlprof knows) \
                 did not fit its stacks"
            }
            status::MISSING_SYMBOL => "a required interpreter symbol was not found",
            status::READ_REFUSED => {
                "the process may not read its own memory (process_vm_readv refused: a seccomp \
                 filter or container policy), so its Python frames cannot be read"
            }
            _ => continue,
        };
        let version = c.python.as_deref().unwrap_or("?");
        let text = format!("Python {version} (pid {}): {why}; Python lines are not attributed, native and memory profiling go on", c.pid);
        if !out.iter().any(|w| w.contains(why)) {
            out.push(text);
        }
    }
    for c in &rec.channels {
        use mlprof_wire::python_heap as heap;
        let (why, lines) = match c.python_heap {
            heap::REPLACED => (
                "its allocator was replaced at start-up (PYTHONMALLOC or -X dev) after mlprof \
                 wrapped it",
                "and the lines' allocations leave them out too",
            ),
            heap::UNREADABLE => (
                "its allocator's blocks did not read as mimalloc's",
                "per-line allocations are still sampled",
            ),
            heap::UNWRAPPED => (
                "its allocator could not be wrapped",
                "and the lines' allocations leave them out too",
            ),
            _ => continue,
        };
        let version = c.python.as_deref().unwrap_or("?");
        let text = format!(
            "Python {version} (pid {}): {why}, so the heap, its peak and what lines held at \
             it leave out Python objects (a free-threaded build serves them outside malloc); \
             {lines}",
            c.pid
        );
        if !out.iter().any(|w| w.contains(why)) {
            out.push(text);
        }
    }
    out
}

/// What a user needs to know when the program did not exit by itself: which signal, when, and
/// how big the heap was (SIGKILL at a large heap is most often the out-of-memory killer or a
/// container's memory limit).
fn death_note(rec: &Recording) -> Option<String> {
    let signal = rec.exit.signal?;
    let heap: i64 = rec
        .channels
        .iter()
        .filter(|c| c.pid == rec.child_pid)
        .map(|c| c.heap_current.max(0))
        .max()
        .unwrap_or(0);
    let rss = rec
        .ticks
        .iter()
        .rev()
        .find(|t| t.rss_bytes > 0)
        .map_or(0, |t| t.rss_bytes);
    let at = format!("{:.1} s", rec.wall_ns as f64 / NS);
    let sizes = format!("heap {}, RSS {}", human(heap as u64), human(rss));
    Some(match signal {
        9 => format!("killed by SIGKILL at {at}, {sizes}: likely out of memory (the kernel's OOM killer or a memory limit), or kill -9"),
        11 => format!("crashed with SIGSEGV at {at}, {sizes}"),
        6 => format!("aborted (SIGABRT) at {at}, {sizes}"),
        7 => format!("crashed with SIGBUS at {at}, {sizes}"),
        n => format!("ended by signal {n} at {at}, {sizes}"),
    })
}

/// Sizes for the note (the model does not depend on the renderers' units).
fn human(bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    if gib >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}
