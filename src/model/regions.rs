//! Regions the program marked itself (`mlprof.mark(...)`, one test under the pytest plugin):
//! each region's own profile, made by cutting the recording to the region's process (and the
//! processes it started meanwhile) and time, and running the same attribution on the cut. The
//! exact figures (heap at the begin, highest heap above it, heap left at the end) come from the
//! preload library's counters; lines come from the samples inside the region. Pure.

use std::collections::{BTreeMap, HashMap};

use super::filter::Filter;
use super::profile::{GpuLineCalls, Profile};
pub use super::sections::{Region, RegionLine};
use crate::recording::gpu::{GpuPoll, GpuRecording};
use crate::recording::gpu_tensors::TensorTrace;
use crate::recording::{
    ChannelSummary, GpuCalls, GpuKernelSum, GpuKernelTotal, GpuKernels, Recording, RegionSpan, Tick,
};
use crate::symbolize::NativeNames;

mod index;
mod tensors;
pub use index::Index;

/// Lines named per list of a region summary.
pub const TOP_LINES: usize = 5;

/// Every region of the recording, summarised, in begin order per process image. The work per
/// region is bounded by what happened inside it (events found by binary search in an index
/// made once), so a session of 100,000 tests takes time in proportion.
pub fn summarize(rec: &Recording, natives: &NativeNames, filter: &Filter) -> Vec<Region> {
    let index = Index::new(rec);
    let mut out = Vec::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        for span in &channel.regions {
            out.push(summary_in(&index, ci, span, natives, filter));
        }
    }
    out.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    out
}

/// The region `span` of channel `ci`, summarised.
pub fn summary(
    rec: &Recording,
    ci: usize,
    span: &RegionSpan,
    natives: &NativeNames,
    filter: &Filter,
) -> Region {
    summary_in(&Index::new(rec), ci, span, natives, filter)
}

fn summary_in(
    index: &Index,
    ci: usize,
    span: &RegionSpan,
    natives: &NativeNames,
    filter: &Filter,
) -> Region {
    let rec = index.rec;
    let end_ns = region_end(rec, ci, span);
    let at_peak = profile_at(index, ci, span, natives, filter, Moment::Peak);
    let heap_start = span.heap_begin.max(0) as u64;
    let end_bytes = span.heap_end.map_or(0, |end| end - span.heap_begin);
    let held_at_end = if end_bytes > 0 || span.heap_end.is_none() {
        top_lines(&profile_at(index, ci, span, natives, filter, Moment::End))
    } else {
        Vec::new()
    };
    let kids = children(index, ci, span.begin_ns, end_ns);
    let children_peak_bytes = kids.iter().map(|&i| own_peak(&rec.channels[i])).sum();
    let mut pids = vec![rec.channels[ci].pid];
    pids.extend(kids.iter().map(|&i| rec.channels[i].pid));
    let gpu_tensor_start_bytes = index
        .tensors
        .iter()
        .filter(|t| pids.contains(&t.pid()))
        .map(|t| t.allocated_at(span.begin_ns))
        .fold(0, u64::saturating_add);
    let gpu_tensor_peak_bytes = at_peak
        .processes
        .iter()
        .filter_map(|q| q.gpu_tensors.as_ref())
        .flat_map(|t| &t.devices)
        .map(|d| d.peak_allocated_bytes)
        .fold(0, u64::saturating_add)
        .saturating_sub(gpu_tensor_start_bytes);
    let cpu = |f: fn(&super::profile::CpuSample) -> f64| -> f64 {
        at_peak.cpu_timeline.iter().map(f).sum()
    };
    Region {
        name: span.name.clone(),
        pid: rec.channels[ci].pid,
        start_s: span.begin_ns as f64 / 1e9,
        duration_s: end_ns.saturating_sub(span.begin_ns) as f64 / 1e9,
        ended: span.end_ns.is_some(),
        heap_start_bytes: heap_start,
        peak_bytes: (span.peak - span.heap_begin).max(0) as u64,
        end_bytes,
        children_peak_bytes,
        cpu_python_s: cpu(|b| b.python_s),
        cpu_native_s: cpu(|b| b.native_s),
        waiting_s: cpu(|b| b.waiting_s),
        kernel_s: cpu(|b| b.kernel_s),
        held_at_peak: top_lines(&at_peak),
        held_at_end,
        gpu_calls: gpu_totals(&at_peak),
        gpu_tensor_start_bytes,
        gpu_tensor_peak_bytes,
        gpu_tensors_at_peak: top_tensor_lines(&at_peak),
    }
}

/// The region's own profile (its peak moment as the peak), for a page of its own; `index`
/// made once for the recording serves every region's.
pub fn profile(
    index: &Index,
    ci: usize,
    span: &RegionSpan,
    natives: &NativeNames,
    filter: &Filter,
) -> Profile {
    profile_at(index, ci, span, natives, filter, Moment::Peak)
}

/// Which moment of a region its lines' `peak_bytes` describe.
#[derive(Clone, Copy, PartialEq)]
enum Moment {
    Peak,
    End,
}

fn profile_at(
    index: &Index,
    ci: usize,
    span: &RegionSpan,
    natives: &NativeNames,
    filter: &Filter,
    moment: Moment,
) -> Profile {
    let cut = cut(index, ci, span, moment, filter);
    super::attribute(&cut, natives, filter)
}

/// What the CUDA calls of the profile's processes did, summed.
fn gpu_totals(p: &Profile) -> GpuLineCalls {
    let mut sum = GpuLineCalls::default();
    for calls in p.processes.iter().filter_map(|q| q.gpu_calls.as_ref()) {
        sum.add(&calls.totals);
    }
    sum
}

/// The lines holding the most at the profile's peak moment.
fn top_lines(p: &Profile) -> Vec<RegionLine> {
    top_by(p, |m| m.peak_bytes)
}

/// The lines whose tensors were live at the profile's GPU peak (each device's).
fn top_tensor_lines(p: &Profile) -> Vec<RegionLine> {
    top_by(p, |m| m.gpu_tensor_peak_bytes)
}

/// The lines with the most of `bytes`, most first (then by line), at most [`TOP_LINES`].
fn top_by(p: &Profile, bytes: fn(&super::profile::Measures) -> u64) -> Vec<RegionLine> {
    let mut lines: Vec<RegionLine> = p
        .lines
        .iter()
        .filter(|l| bytes(&l.measures) > 0)
        .map(|l| RegionLine {
            file: l.file.clone(),
            line: l.line,
            function: l.function.clone(),
            bytes: bytes(&l.measures),
        })
        .collect();
    lines.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.line.cmp(&b.line)));
    lines.truncate(TOP_LINES);
    lines
}

/// When the region ended: its end, else its process's exit, else the end of the run.
fn region_end(rec: &Recording, ci: usize, span: &RegionSpan) -> u64 {
    span.end_ns
        .or(rec.channels[ci].exit_ns)
        .unwrap_or(rec.wall_ns)
        .max(span.begin_ns)
}

/// What a process allocated itself at its highest (a fork child's inherited heap apart).
fn own_peak(c: &ChannelSummary) -> u64 {
    (c.heap_peak - c.inherited_heap as i64).max(0) as u64
}

/// Channels of processes started by channel `ci`'s process (or their descendants) inside
/// `[from, to]`.
fn children(index: &Index, ci: usize, from: u64, to: u64) -> Vec<usize> {
    let rec = index.rec;
    let mut pids = vec![rec.channels[ci].pid];
    let mut out: Vec<usize> = Vec::new();
    // Parents attach before their children: one pass in start order finds every generation.
    for &i in &index.by_start {
        let c = &rec.channels[i];
        if i != ci && c.start_ns >= from && c.start_ns <= to && pids.contains(&c.ppid) {
            out.push(i);
            pids.push(c.pid);
        }
    }
    out
}

/// The recording cut to region `span` of channel `ci`: that process's events inside the
/// region and those of the processes it started meanwhile, times shifted so that the region
/// begins at 0, its heap figures above the heap at its begin, and one peak mark at the
/// region's peak (or its end, for `Moment::End`) so that lines' held bytes are the region's.
fn cut(index: &Index, ci: usize, span: &RegionSpan, moment: Moment, filter: &Filter) -> Recording {
    let rec = index.rec;
    let from = span.begin_ns;
    let to = region_end(rec, ci, span);
    let main = &rec.channels[ci];
    let mut own = clip(index, ci, from, to);
    own.start_ns = 0;
    own.forked = false;
    own.inherited_heap = 0;
    own.exit_code = None;
    own.exit_ns = None;
    own.still_running = false;
    own.heap_peak = (span.peak - span.heap_begin).max(0);
    own.heap_current = span.heap_end.unwrap_or(main.heap_current) - span.heap_begin;
    let peak_at = match moment {
        Moment::Peak => peak_moment(index, ci, from, to),
        Moment::End => to,
    };
    own.heap_peak_seen_ns = peak_at.saturating_sub(from);
    own.peak_marks = vec![(peak_at.saturating_sub(from), own.heap_peak as u64)];
    let mut channels = vec![own];
    let mut sources = vec![ci];
    for i in children(index, ci, from, to) {
        sources.push(i);
        let mut child = clip(index, i, from, to);
        child.start_ns = rec.channels[i].start_ns.saturating_sub(from);
        child.exit_ns = rec.channels[i]
            .exit_ns
            .filter(|&t| t <= to)
            .map(|t| t.saturating_sub(from));
        if child.exit_ns.is_none() {
            child.exit_code = None;
        }
        channels.push(child);
    }
    let pids: Vec<u32> = channels.iter().map(|c| c.pid).collect();
    let gpu_tensors: Vec<TensorTrace> = index
        .tensors
        .iter()
        .filter(|t| pids.contains(&t.pid()))
        .map(|t| t.cut(from, to))
        .collect();
    keep_used_codes(rec, &sources, &mut channels);
    keep_traced_codes(index, &sources, &mut channels, &gpu_tensors, filter);
    // A tick's heap is every live process's: with a process outside the region alive
    // meanwhile (pytest-xdist's other worker running its own test), it is not the region's,
    // and taken as the region's peak instant it left a fork child's 100 MiB line out of the
    // region's lines. Then only the processes' own peaks say when the region peaked.
    let outsiders = rec
        .channels
        .iter()
        .any(|c| !pids.contains(&c.pid) && c.start_ns <= to && c.exit_ns.is_none_or(|e| e >= from));
    let cpu_ns: u64 = channels.iter().map(ChannelSummary::sampled_cpu_ns).sum();
    Recording {
        command: vec![span.name.clone()],
        wall_ns: to.saturating_sub(from),
        child_pid: main.pid,
        exit: crate::recording::ChildExit {
            code: Some(0),
            // What the samples inside it add up to (the kernel's counts cover whole processes).
            usage: crate::recording::Usage {
                user_s: cpu_ns as f64 / 1e9,
                ..Default::default()
            },
            ..Default::default()
        },
        channels,
        procs: rec
            .procs
            .iter()
            .filter(|p| pids.contains(&p.pid))
            .copied()
            .collect(),
        // The tree's heap above the region's begin (its own process's, which is what the
        // region's figures are; RSS stays whole), or none when it is not the region's.
        ticks: index
            .ticks
            .between(from, to)
            .into_iter()
            .map(|i| &rec.ticks[i])
            .map(|t| Tick {
                t_ns: t.t_ns.saturating_sub(from),
                heap_bytes: match outsiders {
                    true => 0,
                    false => t.heap_bytes.saturating_sub(span.heap_begin.max(0) as u64),
                },
                ..*t
            })
            .collect(),
        warnings: Vec::new(),
        labels: rec.labels.clone(),
        gpu: gpu_between(index, from, to),
        gpu_tensors,
        setup: rec.setup,
        // The profiler's cost is the run's: a region's profile does not carry it.
        profiler: Default::default(),
    }
}

/// The GPU polls of the region (and the first one after it, which the samples just before its
/// end are joined to), times shifted as the cut's events are; devices and notes whole.
fn gpu_between(index: &Index, from: u64, to: u64) -> GpuRecording {
    let gpu = &index.rec.gpu;
    let polls = &gpu.polls;
    let mut at = index.gpu.between(from, to);
    let next = at.last().map_or_else(
        || polls.partition_point(|p| p.t_ns < from),
        |&last| last + 1,
    );
    if next < polls.len() && !at.contains(&next) {
        at.push(next);
    }
    GpuRecording {
        polls: at
            .into_iter()
            .map(|i| GpuPoll {
                t_ns: polls[i].t_ns.saturating_sub(from),
                ..polls[i].clone()
            })
            .collect(),
        available: gpu.available,
        reason: gpu.reason.clone(),
        devices: gpu.devices.clone(),
        process_util: gpu.process_util,
        notes: gpu.notes.clone(),
    }
}

/// When the heap was highest between `from` and `to`: the highest peak mark of the regions of
/// `c` inside that time (a region's own, or a region nested in it: the preload library marks
/// only the innermost open region's highs). With no mark (the heap never rose 1 MiB), the end.
fn peak_moment(index: &Index, ci: usize, from: u64, to: u64) -> u64 {
    let c = &index.rec.channels[ci];
    index.channels[ci]
        .regions
        .between(from, to)
        .into_iter()
        .flat_map(|i| &c.regions[i].peak_marks)
        .filter(|&&(t, _)| t >= from && t <= to)
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
        .map_or(to, |&(t, _)| t)
}

/// A channel's events between `from` and `to` (ns from launch), shifted to start at `from`:
/// allocations made inside (freed after `to` counts as not freed), samples and copies inside;
/// CUDA allocations made inside (given back after `to`: held at its end), and the rows of CUDA
/// copies and launches made inside (the collector starts new rows at every region's begin and
/// end, so a region's own are whole rows).
/// Folded allocation groups are left out (only runs long enough to fold have them, and their
/// times are windows, not moments).
fn clip(index: &Index, ci: usize, from: u64, to: u64) -> ChannelSummary {
    let c = &index.rec.channels[ci];
    let at = &index.channels[ci];
    ChannelSummary {
        samples: at.samples.cut(&c.samples, from, to),
        allocs: at.allocs.cut(&c.allocs, from, to),
        copies: at.copies.cut(&c.copies, from, to),
        peak_marks: at
            .peak_marks
            .between(from, to)
            .into_iter()
            .map(|i| c.peak_marks[i])
            .map(|(t, h)| (t - from, h))
            .collect(),
        queued: c
            .queued
            .iter()
            .filter(|q| (from..to).contains(&q.0))
            .map(|&(t, tid, ns)| (t - from, tid, ns))
            .collect(),
        last_wait_ns: c.last_wait_ns.saturating_sub(from),
        heap_peak_seen_ns: c.heap_peak_seen_ns.saturating_sub(from),
        gpu_calls: GpuCalls {
            allocs: at.gpu_allocs.cut(&c.gpu_calls.allocs, from, to),
            copies: at.gpu_copies.whole(&c.gpu_calls.copies, from, to),
            launches: at.gpu_launches.whole(&c.gpu_calls.launches, from, to),
            unmatched_frees: 0,
            kernels: cut_kernels(
                &c.gpu_calls.kernels,
                at.gpu_kernels.whole(&c.gpu_calls.kernels.sampled, from, to),
            ),
        },
        ..c.without_events_or_codes()
    }
}

/// A region's kernels: the rows of sampled launches made inside it, their names (only those),
/// and sums made of them. Kernels are not timed per launch outside the samples, so a region's
/// GPU time is the samples' estimate (each standing for its launch's weight), not a share of
/// exact totals.
fn cut_kernels(k: &GpuKernels, mut sampled: Vec<GpuKernelTotal>) -> GpuKernels {
    let mut names: Vec<String> = Vec::new();
    let mut renamed: HashMap<u32, u32> = HashMap::new();
    let mut sums: BTreeMap<(u32, u32), GpuKernelSum> = BTreeMap::new();
    for r in &mut sampled {
        let name = *renamed.entry(r.name).or_insert_with(|| {
            names.push(k.name(r.name).to_string());
            (names.len() - 1) as u32
        });
        r.name = name;
        let s = sums.entry((r.device, name)).or_insert(GpuKernelSum {
            device: r.device,
            name,
            ..GpuKernelSum::default()
        });
        s.kernels += r.kernels;
        s.device_ns = s.device_ns.saturating_add(r.device_ns);
    }
    GpuKernels {
        names,
        all: sums.into_values().collect(),
        sampled,
        state: k.state,
        taken_ns: None,
        dropped: 0,
    }
}

/// Give each channel of a cut also the code objects of the files its allocator trace's lines
/// are in (the innermost frame of each stack in a profiled file, as `gpu_tensors` charges
/// them), so that those lines are named as its sampled lines are: found through the index's
/// code objects by file, in proportion to the files, not to the whole table.
fn keep_traced_codes(
    index: &Index,
    sources: &[usize],
    channels: &mut [ChannelSummary],
    traces: &[TensorTrace],
    filter: &Filter,
) {
    for (c, &source) in channels.iter_mut().zip(sources) {
        let mut files: Vec<&str> = traces
            .iter()
            .filter(|t| t.pid == c.pid)
            .flat_map(|t| (0..t.stacks.len() as u32).map(move |s| (t, s)))
            .filter_map(|(t, s)| t.frames_of(s).find(|f| filter.profiles(&f.0)))
            .map(|f| f.0.as_str())
            .collect();
        files.sort_unstable();
        files.dedup();
        let whole = &index.rec.channels[source];
        let by_file = &index.channels[source].codes_by_file;
        for file in files {
            for id in by_file.get(file).into_iter().flatten() {
                if let Some(code) = whole.codes.get(id) {
                    c.codes.entry(*id).or_insert_with(|| code.clone());
                }
            }
        }
    }
}

/// Give each channel of a cut the code objects its frames, or those of the processes it
/// forked, name (a fork child finds its inherited code objects in its parent's table), and the
/// mapped files its samples' callers are in: not the whole tables, copied once per region.
/// `sources`: the index in `rec` of each channel of the cut.
fn keep_used_codes(rec: &Recording, sources: &[usize], channels: &mut [ChannelSummary]) {
    let mut used: Vec<u32> = Vec::new();
    for c in channels.iter() {
        let frames = c
            .samples
            .iter()
            .flat_map(|s| &s.frames)
            .chain(c.allocs.iter().flat_map(|a| &a.frames))
            .chain(c.copies.iter().flat_map(|s| &s.frames))
            .chain(c.gpu_calls.allocs.iter().flat_map(|a| &a.frames))
            .chain(c.gpu_calls.copies.iter().flat_map(|r| &r.frames))
            .chain(c.gpu_calls.launches.iter().flat_map(|r| &r.frames));
        used.extend(frames.map(|&(code, _)| code));
    }
    used.sort_unstable();
    used.dedup();
    for (c, &source) in channels.iter_mut().zip(sources) {
        let whole = &rec.channels[source];
        c.codes = used
            .iter()
            .filter_map(|id| Some((*id, whole.codes.get(id)?.clone())))
            .collect();
        // The mapped files are looked up only by the callers of samples
        // (`cpu::called_from_native`): those it finds, in their order.
        let mut maps: Vec<usize> = c
            .samples
            .iter()
            .filter(|s| s.caller != 0)
            .filter_map(|s| crate::recording::maps::find_mapping_index(&whole.maps, s.caller))
            .collect();
        maps.sort_unstable();
        maps.dedup();
        c.maps = maps.into_iter().map(|i| whole.maps[i].clone()).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::build::{RecordingBuilder, PID};

    const MS: u64 = 1_000_000;
    const MB: u64 = 1 << 20;

    /// This thread's CPU time (load on the machine does not change it much, unlike wall time).
    fn thread_cpu_s() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is valid for writes.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }

    /// A session of `n` tests one after the other, as a long pytest run records it: one region
    /// of 1 ms each, with a CPU sample and an allocation in it, a code object per ten tests, a
    /// collector tick per twenty; every region is summarised with its own figures.
    fn session(n: u64) -> (f64, Vec<Region>) {
        let mut b = RecordingBuilder::new(n + 10);
        for code in 1..=(n / 10) as u32 {
            b = b.code(code, "/w/test_many.py", "test_one", 10, &[10, 11]);
        }
        for i in 0..n {
            let code = (i / 10) as u32 + 1;
            b = b.cpu(i, PID, 0, 1, &[(code, 1)]).alloc(
                i,
                0x10_0000 + i * 64,
                MB,
                &[(code, 1)],
                None,
                false,
            );
        }
        let mut rec = b.build();
        for t in (0..n).step_by(20) {
            rec.ticks.push(Tick {
                t_ns: t * MS,
                ..Tick::default()
            });
        }
        rec.channels[0].regions = (0..n)
            .map(|i| RegionSpan {
                id: i + 1,
                name: format!("test_many.py::test_{i}"),
                tid: PID,
                begin_ns: i * MS,
                end_ns: Some(i * MS + MS - 1),
                heap_begin: (i * MB) as i64,
                heap_end: Some(((i + 1) * MB) as i64),
                peak: ((i + 1) * MB) as i64,
                peak_marks: vec![(i * MS + 1, ((i + 1) * MB) as i64)],
                report: 0,
            })
            .collect();
        let started = thread_cpu_s();
        let regions = summarize(&rec, &NativeNames::default(), &Filter::default());
        (thread_cpu_s() - started, regions)
    }

    /// Ten times the regions take about ten times the work (it was quadratic: each region's
    /// cut scanned every region, event and code object of the run, and 100,000 took minutes).
    /// CPU time, not wall time, and a wide margin: 30 where linear is 10 and quadratic 100.
    #[test]
    fn regions_are_summarised_in_time_linear_in_their_number() {
        let (small_s, small) = session(1_000);
        let (large_s, large) = session(10_000);
        assert_eq!((small.len(), large.len()), (1_000, 10_000));
        for (i, r) in large.iter().enumerate() {
            assert_eq!(r.name, format!("test_many.py::test_{i}"));
            assert_eq!((r.peak_bytes, r.end_bytes), (MB, MB as i64));
            assert_eq!(r.held_at_end.len(), 1, "{r:?}");
            assert_eq!(r.held_at_end[0].bytes, MB, "{r:?}");
        }
        assert!(
            large_s <= 30.0 * small_s.max(1e-3),
            "1,000 regions: {small_s:.3} s of CPU; 10,000: {large_s:.3} s"
        );
    }

    /// A region's cut holds its own GPU polls (and the next), on its own clock, not the whole
    /// run's on the run's clock (copied for every region, they made a GPU session quadratic).
    #[test]
    fn a_regions_cut_holds_its_gpu_polls_on_its_clock() {
        let mut b = RecordingBuilder::new(1_000);
        for t in (0..1_000).step_by(10) {
            b = b.gpu_poll(t, t * MB, 50);
        }
        let mut rec = b.build();
        let span = RegionSpan {
            id: 1,
            begin_ns: 105 * MS,
            end_ns: Some(200 * MS),
            ..RegionSpan::default()
        };
        rec.channels[0].regions.push(span.clone());
        let cut = cut(
            &Index::new(&rec),
            0,
            &span,
            Moment::Peak,
            &Filter::default(),
        );
        let times: Vec<u64> = cut.gpu.polls.iter().map(|p| p.t_ns / MS).collect();
        assert_eq!(times, (5..=105).step_by(10).collect::<Vec<u64>>());
        assert_eq!(cut.gpu.polls[0].processes, rec.gpu.polls[11].processes);
        assert_eq!(cut.gpu.devices, rec.gpu.devices);
    }

    /// A region's cut and summary hold its own CUDA calls: allocations made inside it (one given
    /// back after its end is held at its end), and the copy and launch rows wholly inside it.
    #[test]
    fn a_regions_cut_holds_its_own_cuda_calls() {
        use crate::recording::{GpuAllocEvent, GpuCopyTotal, GpuLaunchTotal};
        use mlprof_wire::gpu_copy;
        let mut rec = RecordingBuilder::new(1_000)
            .code(1, "/w/train.py", "step", 10, &[10, 11])
            .build();
        let alloc = |t: u64, mb: u64, freed: Option<u64>| GpuAllocEvent {
            t_ns: t * MS,
            addr: t,
            size: mb * MB,
            device: Some(0),
            frames: vec![(1, 1)],
            freed_ns: freed.map(|f| f * MS),
            ..GpuAllocEvent::default()
        };
        let copy = |first: u64, last: u64, mb: u64| GpuCopyTotal {
            direction: gpu_copy::HOST_TO_DEVICE,
            frames: vec![(1, 1)],
            bytes: mb * MB,
            calls: 1,
            first_ns: first * MS,
            last_ns: last * MS,
            ..GpuCopyTotal::default()
        };
        rec.channels[0].gpu_calls = crate::recording::GpuCalls {
            allocs: vec![
                alloc(50, 7, None),        // before the region
                alloc(150, 10, Some(160)), // inside, given back inside
                alloc(170, 20, Some(500)), // inside, given back after: held at its end
            ],
            copies: vec![copy(50, 60, 1), copy(120, 180, 3), copy(190, 250, 100)],
            launches: vec![GpuLaunchTotal {
                frames: vec![(1, 1)],
                launches: 64,
                first_ns: 130 * MS,
                last_ns: 140 * MS,
                ..GpuLaunchTotal::default()
            }],
            unmatched_frees: 2,
            kernels: Default::default(),
        };
        let span = RegionSpan {
            id: 1,
            name: "step".into(),
            tid: PID,
            begin_ns: 100 * MS,
            end_ns: Some(200 * MS),
            ..RegionSpan::default()
        };
        rec.channels[0].regions.push(span.clone());
        let calls = cut(
            &Index::new(&rec),
            0,
            &span,
            Moment::Peak,
            &Filter::default(),
        )
        .channels[0]
            .gpu_calls
            .clone();
        let allocs: Vec<_> = calls
            .allocs
            .iter()
            .map(|a| (a.t_ns / MS, a.freed_ns))
            .collect();
        assert_eq!(allocs, [(50, Some(60 * MS)), (70, None)]);
        let copies: Vec<_> = calls
            .copies
            .iter()
            .map(|c| (c.first_ns / MS, c.bytes / MB))
            .collect();
        assert_eq!(
            copies,
            [(20, 3)],
            "the rows wholly inside, on the region's clock"
        );
        assert_eq!((calls.launches.len(), calls.unmatched_frees), (1, 0));
        let r = summary(&rec, 0, &span, &NativeNames::default(), &Filter::default());
        let g = &r.gpu_calls;
        assert_eq!(
            (g.gpu_reserved_bytes, g.gpu_peak_bytes, g.gpu_freed_bytes),
            (30 * MB, 20 * MB, 10 * MB)
        );
        assert_eq!((g.gpu_h2d_bytes, g.gpu_launches), (3 * MB, 64));
    }

    /// A test (region) whose fork child allocated 100 MiB, while another process outside the
    /// test (xdist's other worker) held 150 MiB a moment before: the child's line is what the
    /// test held at its peak.
    #[test]
    fn a_fork_childs_line_is_held_at_the_regions_peak_whatever_other_processes_held() {
        let mut rec = RecordingBuilder::new(1_000)
            .code(1, "/w/test_x.py", "child", 10, &[10, 11])
            .build();
        let codes = rec.channels[0].codes.clone();
        rec.channels[0].regions.push(RegionSpan {
            id: 1,
            name: "test_x.py::test_fork".into(),
            tid: PID,
            begin_ns: 100 * MS,
            end_ns: Some(600 * MS),
            heap_begin: (10 * MB) as i64,
            heap_end: Some((10 * MB) as i64),
            peak: (10 * MB + 40_000) as i64,
            peak_marks: Vec::new(),
            report: 1,
        });
        let child = ChannelSummary {
            pid: PID + 1,
            ppid: PID,
            start_ns: 200 * MS,
            exit_code: Some(0),
            exit_ns: Some(400 * MS),
            python: rec.channels[0].python.clone(),
            forked: true,
            inherited_heap: 10 * MB,
            heap_peak: (110 * MB) as i64,
            codes,
            allocs: vec![crate::recording::AllocSample {
                t_ns: 250 * MS,
                tid: PID + 1,
                addr: 0x1000,
                size: 100 * MB,
                weight: 100 * MB,
                flags: 0,
                frames: vec![(1, 1)],
                freed_ns: Some(350 * MS),
                cut_ns: None,
            }],
            peak_marks: vec![(251 * MS, 110 * MB)],
            ..ChannelSummary::default()
        };
        let outsider = ChannelSummary {
            pid: 200,
            ppid: 1,
            start_ns: 0,
            ..ChannelSummary::default()
        };
        rec.channels.extend([child, outsider]);
        for (t_ms, heap) in [(150, 160 * MB), (300, 130 * MB)] {
            rec.ticks.push(Tick {
                t_ns: t_ms * MS,
                heap_bytes: heap,
                ..Tick::default()
            });
        }
        let span = rec.channels[0].regions[0].clone();
        let r = summary(&rec, 0, &span, &NativeNames::default(), &Filter::default());
        assert_eq!(r.children_peak_bytes, 100 * MB);
        let held: Vec<(u32, u64)> = r.held_at_peak.iter().map(|l| (l.line, l.bytes)).collect();
        assert_eq!(held, vec![(11, 100 * MB)], "{r:?}");
    }
}
