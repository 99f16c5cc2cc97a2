//! Regions the program marked itself (`mlprof.mark(...)`, one test under the pytest plugin):
//! each region's own profile, made by cutting the recording to the region's process (and the
//! processes it started meanwhile) and time, and running the same attribution on the cut. The
//! exact figures (heap at the begin, highest heap above it, heap left at the end) come from the
//! preload library's counters; lines come from the samples inside the region. Pure.

use serde::{Deserialize, Serialize};

use super::filter::Filter;
use super::profile::Profile;
use crate::recording::{between, ChannelSummary, Recording, RegionSpan, Tick};
use crate::symbolize::NativeNames;

/// Lines named per list of a region summary.
pub const TOP_LINES: usize = 5;

/// One region of the program's marking, summarised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Region {
    /// The name the program gave it (a pytest node id for tests).
    pub name: String,
    /// The process that marked it.
    pub pid: u32,
    /// Seconds from launch of its begin.
    pub start_s: f64,
    /// Seconds from begin to end (to the end of the run if it never ended).
    pub duration_s: f64,
    /// Whether it ended (false: the process died or the run ended inside it).
    pub ended: bool,
    /// Exact heap of its process when it began.
    pub heap_start_bytes: u64,
    /// Exact: the highest heap of its process inside the region, above `heap_start_bytes`.
    pub peak_bytes: u64,
    /// Exact: heap at its end minus heap at its begin (negative: it freed more than it kept).
    pub end_bytes: i64,
    /// Highest heap of the processes it started (their own allocations, not what a fork child
    /// inherited), summed; 0 if it started none.
    pub children_peak_bytes: u64,
    /// CPU seconds interpreting Python inside it (its process and those it started).
    pub cpu_python_s: f64,
    /// CPU seconds in native code.
    pub cpu_native_s: f64,
    /// Seconds waiting (by the run's idle convention).
    pub cpu_system_s: f64,
    /// Lines whose allocations made inside the region were live at its peak, largest first
    /// (sampled; at most [`TOP_LINES`]).
    pub held_at_peak: Vec<RegionLine>,
    /// Lines whose allocations made inside the region were still live at its end.
    pub held_at_end: Vec<RegionLine>,
}

/// A line and the bytes it held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RegionLine {
    /// Source file.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// Qualified function name.
    pub function: String,
    /// Bytes (sampled estimate).
    pub bytes: u64,
}

/// Every region of the recording, summarised, in begin order per process image.
pub fn summarize(rec: &Recording, natives: &NativeNames, filter: &Filter) -> Vec<Region> {
    let mut out = Vec::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        for span in &channel.regions {
            out.push(summary(rec, ci, span, natives, filter));
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
    let end_ns = region_end(rec, ci, span);
    let at_peak = profile_at(rec, ci, span, natives, filter, Moment::Peak);
    let heap_start = span.heap_begin.max(0) as u64;
    let end_bytes = span.heap_end.map_or(0, |end| end - span.heap_begin);
    let held_at_end = if end_bytes > 0 || span.heap_end.is_none() {
        top_lines(&profile_at(rec, ci, span, natives, filter, Moment::End))
    } else {
        Vec::new()
    };
    let children_peak_bytes = children(rec, ci, span.begin_ns, end_ns)
        .iter()
        .map(|&i| own_peak(&rec.channels[i]))
        .sum();
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
        cpu_system_s: cpu(|b| b.system_s),
        held_at_peak: top_lines(&at_peak),
        held_at_end,
    }
}

/// The region's own profile (its peak moment as the peak), for a page of its own.
pub fn profile(
    rec: &Recording,
    ci: usize,
    span: &RegionSpan,
    natives: &NativeNames,
    filter: &Filter,
) -> Profile {
    profile_at(rec, ci, span, natives, filter, Moment::Peak)
}

/// Which moment of a region its lines' `peak_bytes` describe.
#[derive(Clone, Copy, PartialEq)]
enum Moment {
    Peak,
    End,
}

fn profile_at(
    rec: &Recording,
    ci: usize,
    span: &RegionSpan,
    natives: &NativeNames,
    filter: &Filter,
    moment: Moment,
) -> Profile {
    let cut = cut(rec, ci, span, moment);
    super::attribute(&cut, natives, filter)
}

/// The lines holding the most at the profile's peak moment.
fn top_lines(p: &Profile) -> Vec<RegionLine> {
    let mut lines: Vec<RegionLine> = p
        .lines
        .iter()
        .filter(|l| l.measures.peak_bytes > 0)
        .map(|l| RegionLine {
            file: l.file.clone(),
            line: l.line,
            function: l.function.clone(),
            bytes: l.measures.peak_bytes,
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
fn children(rec: &Recording, ci: usize, from: u64, to: u64) -> Vec<usize> {
    let mut pids = vec![rec.channels[ci].pid];
    let mut out: Vec<usize> = Vec::new();
    // Parents attach before their children: one pass in start order finds every generation.
    let mut order: Vec<usize> = (0..rec.channels.len()).collect();
    order.sort_by_key(|&i| rec.channels[i].start_ns);
    for i in order {
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
fn cut(rec: &Recording, ci: usize, span: &RegionSpan, moment: Moment) -> Recording {
    let from = span.begin_ns;
    let to = region_end(rec, ci, span);
    let main = &rec.channels[ci];
    let mut own = clip(main, from, to);
    own.start_ns = 0;
    own.forked = false;
    own.inherited_heap = 0;
    own.exit_code = None;
    own.exit_ns = None;
    own.still_running = false;
    own.heap_peak = (span.peak - span.heap_begin).max(0);
    own.heap_current = span.heap_end.unwrap_or(main.heap_current) - span.heap_begin;
    let peak_at = match moment {
        Moment::Peak => peak_moment(main, from, to),
        Moment::End => to,
    };
    own.heap_peak_seen_ns = peak_at.saturating_sub(from);
    own.peak_marks = vec![(peak_at.saturating_sub(from), own.heap_peak as u64)];
    let mut channels = vec![own];
    for i in children(rec, ci, from, to) {
        let mut child = clip(&rec.channels[i], from, to);
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
    // A tick's heap is every live process's: with a process outside the region alive
    // meanwhile (pytest-xdist's other worker running its own test), it is not the region's,
    // and taken as the region's peak instant it left a fork child's 100 MiB line out of the
    // region's lines. Then only the processes' own peaks say when the region peaked.
    let outsiders = rec
        .channels
        .iter()
        .any(|c| !pids.contains(&c.pid) && c.start_ns <= to && c.exit_ns.is_none_or(|e| e >= from));
    let cpu_ns: u64 = channels
        .iter()
        .flat_map(|c| &c.samples)
        .filter(|s| s.flags & mlprof_wire::sample_flags::WAITING == 0)
        .map(|s| s.weight_ns)
        .sum();
    Recording {
        command: vec![span.name.clone()],
        wall_ns: to.saturating_sub(from),
        child_pid: main.pid,
        exit: crate::launch::ChildExit {
            code: Some(0),
            // What the samples inside it add up to (the kernel's counts cover whole processes).
            usage: crate::launch::Usage {
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
        ticks: rec
            .ticks
            .iter()
            .filter(|t| t.t_ns >= from && t.t_ns <= to)
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
        gpu: rec.gpu.clone(),
    }
}

/// When the heap was highest between `from` and `to`: the highest peak mark of the regions of
/// `c` inside that time (a region's own, or a region nested in it: the preload library marks
/// only the innermost open region's highs). With no mark (the heap never rose 1 MiB), the end.
fn peak_moment(c: &ChannelSummary, from: u64, to: u64) -> u64 {
    c.regions
        .iter()
        .filter(|r| r.begin_ns >= from && r.begin_ns <= to)
        .flat_map(|r| &r.peak_marks)
        .filter(|&&(t, _)| t >= from && t <= to)
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
        .map_or(to, |&(t, _)| t)
}

/// A channel's events between `from` and `to` (ns from launch), shifted to start at `from`:
/// allocations made inside (freed after `to` counts as not freed), samples and copies inside.
/// Folded allocation groups are left out (only runs long enough to fold have them, and their
/// times are windows, not moments).
fn clip(c: &ChannelSummary, from: u64, to: u64) -> ChannelSummary {
    ChannelSummary {
        samples: between(&c.samples, from, to, true),
        allocs: between(&c.allocs, from, to, true),
        copies: between(&c.copies, from, to, true),
        peak_marks: c
            .peak_marks
            .iter()
            .filter(|m| (from..=to).contains(&m.0))
            .map(|&(t, h)| (t - from, h))
            .collect(),
        last_wait_ns: c.last_wait_ns.saturating_sub(from),
        heap_peak_seen_ns: c.heap_peak_seen_ns.saturating_sub(from),
        ..c.without_events()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::build::{RecordingBuilder, PID};

    const MS: u64 = 1_000_000;
    const MB: u64 = 1 << 20;

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
