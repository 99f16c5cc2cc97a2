//! `mlprof merge`: several profiles (one per host or rank of a distributed job) combined into
//! one. Lines, functions, stacks and threads are summed over the inputs; the memory and GPU
//! figures are the sums of each input's own figures (their clocks are not shared, so the
//! timelines are summed by time since each run's launch); `ranks` keeps every input's totals.

use std::collections::BTreeMap;

use super::profile::*;
use super::sections::Violation;

/// One input of a merge: where it came from and the profile itself.
pub struct Input {
    /// The file name, shown when the profile has no rank or host label.
    pub source: String,
    /// The profile.
    pub profile: Profile,
}

/// The merge of `inputs` (at least one), in the order given.
pub fn merge(inputs: Vec<Input>) -> Profile {
    let names = rank_names(&inputs);
    let mut out = Profile {
        schema: SCHEMA.to_string(),
        ..Profile::default()
    };
    let mut lines: BTreeMap<(String, u32, String), LineStats> = BTreeMap::new();
    let mut functions: BTreeMap<(String, String, u32), FunctionStats> = BTreeMap::new();
    let mut frames: BTreeMap<StackFrame, u32> = BTreeMap::new();
    let mut timelines = Vec::new();
    let mut gpu_timelines = Vec::new();
    let mut cpu_timelines = Vec::new();
    let mut largest_peak = 0;
    for (input, name) in inputs.into_iter().zip(names) {
        let p = input.profile;
        if p.ranks.len() >= 2 {
            // A run of several ranks (one node's): its ranks, each as it was.
            out.ranks.extend(p.ranks.iter().cloned().map(|r| Rank {
                source: input.source.clone(),
                ..r
            }));
        } else {
            out.ranks.push(rank(&p, &name, &input.source));
        }
        let success = |e: &Exit| e.code == Some(0) && e.signal.is_none();
        if out.ranks.len() == 1 || (success(&out.exit) && !success(&p.exit)) {
            out.exit = p.exit;
            if out.command.is_empty() {
                out.command = p.command.clone();
            }
        }
        out.wall_s = out.wall_s.max(p.wall_s);
        out.cpu_user_s += p.cpu_user_s;
        out.cpu_kernel_s += p.cpu_kernel_s;
        out.cpu_unreaped_s += p.cpu_unreaped_s;
        out.profiler.cpu_s += p.profiler.cpu_s;
        out.profiler.proc_reads_s += p.profiler.proc_reads_s;
        out.profiler.waits_s += p.profiler.waits_s;
        out.processes
            .extend(p.processes.iter().cloned().map(|proc| Process {
                rank: proc.rank.or_else(|| Some(name.clone())),
                ..proc
            }));
        add_memory(&mut out.memory, &p.memory, &mut largest_peak);
        timelines.push(ended(&p.memory.timeline, p.wall_s, |s| s.t_s));
        add_gpu(&mut out.gpu, &p.gpu, &name);
        gpu_timelines.push(ended(&p.gpu.timeline, p.wall_s, |s| s.t_s));
        for l in p.lines {
            let key = (l.file.clone(), l.line, l.function.clone());
            match lines.get_mut(&key) {
                Some(into) => {
                    add_measures(&mut into.measures, &l.measures);
                    add_footprints(&mut into.footprint_bytes, &l.footprint_bytes);
                    if into.source.is_empty() {
                        into.source = l.source;
                    }
                }
                None => {
                    lines.insert(key, l);
                }
            }
        }
        for f in p.functions {
            let key = (f.file.clone(), f.function.clone(), f.line);
            match functions.get_mut(&key) {
                Some(into) => add_measures(&mut into.measures, &f.measures),
                None => {
                    functions.insert(key, f);
                }
            }
        }
        cpu_timelines.push(p.cpu_timeline);
        let first_stack = out.stacks.len() as u32;
        for s in p.stacks {
            let remapped = s
                .frames
                .iter()
                .map(|&i| frame_id(&mut frames, &p.stack_frames[i as usize]))
                .collect();
            out.stacks.push(StackStats {
                frames: remapped,
                ..s
            });
        }
        out.samples.extend(p.samples.iter().map(|s| TimedSample {
            stack: s.stack + first_stack,
            ..*s
        }));
        out.threads.extend(p.threads);
        out.dropped_events += p.dropped_events;
        out.cpu_samples += p.cpu_samples;
        out.event_window_s = out.event_window_s.max(p.event_window_s);
        if out.idle == Idle::Unrecorded || p.idle == Idle::All {
            out.idle = p.idle;
        }
        if out.sample_interval_s == 0.0 {
            out.sample_interval_s = p.sample_interval_s;
        }
        out.memory_sample_bytes = out.memory_sample_bytes.max(p.memory_sample_bytes);
        out.cpus = out.cpus.max(p.cpus);
        out.copy_sample_bytes = out.copy_sample_bytes.max(p.copy_sample_bytes);
        out.warnings
            .extend(p.warnings.into_iter().map(|w| format!("{name}: {w}")));
        out.violations
            .extend(p.violations.into_iter().map(|v| Violation {
                message: format!("{name}: {}", v.message),
                ..v
            }));
    }
    out.memory.timeline = sum_steps(
        &timelines,
        |s| s.t_s,
        |acc: &mut MemorySample, s| {
            acc.heap_bytes += s.heap_bytes;
            acc.rss_bytes += s.rss_bytes;
            acc.mapped_bytes += s.mapped_bytes;
        },
    );
    out.gpu.timeline = sum_steps(
        &gpu_timelines,
        |s| s.t_s,
        |acc: &mut GpuSample, s| {
            acc.util_pct = acc.util_pct.max(s.util_pct);
            acc.memory_bytes += s.memory_bytes;
            acc.device_util_pct = acc.device_util_pct.max(s.device_util_pct);
            acc.device_memory_bytes += s.device_memory_bytes;
        },
    );
    let gpu_ranks: Vec<&Rank> = out.ranks.iter().filter(|r| r.gpu_available).collect();
    if !gpu_ranks.is_empty() {
        out.gpu.average_util_pct = gpu_ranks
            .iter()
            .map(|r| r.gpu_average_util_pct)
            .sum::<f64>()
            / gpu_ranks.len() as f64;
    }
    out.cpu_timeline = rebin(cpu_timelines);
    out.lines = lines.into_values().collect();
    out.functions = functions.into_values().collect();
    let mut ordered: Vec<(StackFrame, u32)> = frames.into_iter().collect();
    ordered.sort_by_key(|(_, id)| *id);
    out.stack_frames = ordered.into_iter().map(|(f, _)| f).collect();
    out.labels = common_labels(&out.ranks);
    out.samples = super::stacks::thin(std::mem::take(&mut out.samples), super::stacks::MAX_SAMPLES);
    super::ranks::compare(&mut out);
    out
}

/// `rank N` when the profile has a `RANK` label, else its host, else its file name; made
/// unique by appending the file name when two inputs share one.
fn rank_names(inputs: &[Input]) -> Vec<String> {
    let base: Vec<String> = inputs
        .iter()
        .map(|i| {
            let labels = &i.profile.labels;
            match (labels.get("rank"), labels.get("host")) {
                (Some(rank), _) => format!("rank {rank}"),
                (None, Some(host)) => host.clone(),
                (None, None) => i.source.clone(),
            }
        })
        .collect();
    base.iter()
        .zip(inputs)
        .map(|(name, input)| {
            if base.iter().filter(|n| *n == name).count() > 1 && *name != input.source {
                format!("{name} ({})", input.source)
            } else {
                name.clone()
            }
        })
        .collect()
}

fn rank(p: &Profile, name: &str, source: &str) -> Rank {
    Rank {
        name: name.to_string(),
        source: source.to_string(),
        labels: p.labels.clone(),
        command: p.command.clone(),
        exit: p.exit,
        wall_s: p.wall_s,
        cpu_s: p.cpu_s(),
        peak_heap_bytes: p.memory.peak_heap_bytes,
        peak_rss_bytes: p.memory.peak_rss_bytes,
        peak_gpu_memory_bytes: p.gpu.peak_memory_bytes,
        gpu_available: p.gpu.available,
        gpu_average_util_pct: p.gpu.average_util_pct,
        alloc_bytes: p.lines.iter().map(|l| l.measures.alloc_bytes).sum(),
        processes: p.processes.len(),
        dropped_events: p.dropped_events,
        rank: p.labels.get("rank").and_then(|r| r.parse().ok()),
        pids: p.processes.iter().map(|q| q.pid).collect(),
        cpu_python_s: p.lines.iter().map(|l| l.measures.cpu_python_s).sum(),
        cpu_native_s: p.lines.iter().map(|l| l.measures.cpu_native_s).sum(),
        waiting_s: p.lines.iter().map(|l| l.measures.waiting_s).sum(),
        kernel_s: p.lines.iter().map(|l| l.measures.kernel_s).sum(),
        collective_s: super::ranks::collective_s(p),
        lines: super::ranks::rank_lines(&p.lines),
    }
}

fn add_memory(into: &mut Memory, m: &Memory, largest: &mut u64) {
    if m.peak_heap_bytes > *largest {
        *largest = m.peak_heap_bytes;
        into.peak_at_s = m.peak_at_s;
        into.held_at_s = m.held_at_s;
    }
    into.peak_heap_bytes += m.peak_heap_bytes;
    into.peak_rss_bytes += m.peak_rss_bytes;
    into.unaccounted_bytes += m.unaccounted_bytes;
    into.peak_mapped_bytes += m.peak_mapped_bytes;
    into.peak_counted_bytes += m.peak_counted_bytes;
}

fn add_gpu(into: &mut Gpu, g: &Gpu, name: &str) {
    into.notes
        .extend(g.notes.iter().map(|n| format!("{name}: {n}")));
    if g.available {
        into.available = true;
        into.reason = None;
    } else if !into.available && into.reason.is_none() {
        into.reason = g.reason.clone();
    }
    for d in &g.devices {
        if !into.devices.contains(d) {
            into.devices.push(d.clone());
        }
    }
    into.peak_memory_bytes += g.peak_memory_bytes;
    if let Some(calls) = &g.calls {
        into.calls.get_or_insert_with(Default::default).add(calls);
    }
}

fn add_measures(into: &mut Measures, m: &Measures) {
    into.cpu_python_s += m.cpu_python_s;
    into.cpu_native_s += m.cpu_native_s;
    into.waiting_s += m.waiting_s;
    into.kernel_s += m.kernel_s;
    into.waiting_for_workers_s += m.waiting_for_workers_s;
    into.cpu_spin_s += m.cpu_spin_s;
    into.copy_loop_s += m.copy_loop_s;
    into.alloc_bytes += m.alloc_bytes;
    into.alloc_python_bytes += m.alloc_python_bytes;
    into.peak_blocks += m.peak_blocks;
    into.peak_bytes += m.peak_bytes;
    into.copy_bytes += m.copy_bytes;
    into.mapped_peak_bytes += m.mapped_peak_bytes;
    into.leak = match (into.leak, m.leak) {
        (Some(a), Some(b)) => Some(Leak {
            likelihood: a.likelihood.max(b.likelihood),
            bytes_per_s: a.bytes_per_s + b.bytes_per_s,
        }),
        (a, b) => a.or(b),
    };
    into.gpu_util_pct = into.gpu_util_pct.max(m.gpu_util_pct);
    into.gpu_memory_bytes += m.gpu_memory_bytes;
    into.gpu_calls.add(&m.gpu_calls);
    into.gpu_tensor_peak_bytes += m.gpu_tensor_peak_bytes;
    for n in &m.native {
        match into
            .native
            .iter_mut()
            .find(|x| x.symbol == n.symbol && x.library == n.library)
        {
            Some(x) => x.cpu_s += n.cpu_s,
            None => into.native.push(n.clone()),
        }
    }
    into.native.sort_by(|a, b| b.cpu_s.total_cmp(&a.cpu_s));
}

fn add_footprints(into: &mut Vec<u64>, more: &[u64]) {
    if into.len() < more.len() {
        into.resize(more.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(more) {
        *a += b;
    }
}

fn frame_id(frames: &mut BTreeMap<StackFrame, u32>, frame: &StackFrame) -> u32 {
    let next = frames.len() as u32;
    *frames.entry(frame.clone()).or_insert(next)
}

/// A timeline that drops to zero when its run ended (`wall_s`), so that a rank that ended
/// early adds nothing afterwards.
fn ended<T: Copy + Default + SetTime>(
    series: &[T],
    wall_s: f64,
    time: impl Fn(&T) -> f64,
) -> Vec<T> {
    let mut out = series.to_vec();
    if out.last().is_some_and(|last| time(last) < wall_s) {
        let mut end = T::default();
        end.set_time(wall_s);
        out.push(end);
    }
    out
}

/// CPU timelines of several runs on one grid: buckets as wide as the widest input's.
fn rebin(timelines: Vec<Vec<CpuSample>>) -> Vec<CpuSample> {
    let span = timelines
        .iter()
        .flatten()
        .map(|c| c.span_s)
        .fold(0.0, f64::max);
    if span <= 0.0 {
        return Vec::new();
    }
    let mut buckets: BTreeMap<i64, CpuSample> = BTreeMap::new();
    for c in timelines.iter().flatten() {
        let key = (c.t_s / span).floor() as i64;
        let into = buckets.entry(key).or_insert(CpuSample {
            t_s: key as f64 * span,
            span_s: span,
            ..CpuSample::default()
        });
        into.python_s += c.python_s;
        into.native_s += c.native_s;
        into.waiting_s += c.waiting_s;
        into.kernel_s += c.kernel_s;
    }
    buckets.into_values().collect()
}

/// Step functions summed: at every time any input has a point, each input contributes its last
/// point at or before that time.
fn sum_steps<T: Copy + Default + SetTime>(
    series: &[Vec<T>],
    time: impl Fn(&T) -> f64,
    add: impl Fn(&mut T, &T),
) -> Vec<T> {
    let mut times: Vec<f64> = series.iter().flatten().map(&time).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut cursor = vec![0usize; series.len()];
    let mut out = Vec::with_capacity(times.len());
    for t in times {
        let mut acc = T::default();
        acc.set_time(t);
        for (s, pos) in series.iter().zip(cursor.iter_mut()) {
            while *pos < s.len() && time(&s[*pos]) <= t {
                *pos += 1;
            }
            if *pos > 0 {
                add(&mut acc, &s[*pos - 1]);
            }
        }
        out.push(acc);
    }
    out
}

/// Timeline points whose time can be set.
trait SetTime {
    fn set_time(&mut self, t_s: f64);
}

impl SetTime for MemorySample {
    fn set_time(&mut self, t_s: f64) {
        self.t_s = t_s;
    }
}

impl SetTime for GpuSample {
    fn set_time(&mut self, t_s: f64) {
        self.t_s = t_s;
    }
}

/// Labels every input shares (a differing label, such as `rank`, is in `ranks`).
fn common_labels(ranks: &[Rank]) -> BTreeMap<String, String> {
    let Some(first) = ranks.first() else {
        return BTreeMap::new();
    };
    first
        .labels
        .iter()
        .filter(|(k, v)| ranks.iter().all(|r| r.labels.get(*k) == Some(v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank_profile(rank: &str, peak: u64, line_bytes: u64) -> Profile {
        let mut p = Profile {
            schema: SCHEMA.to_string(),
            command: vec!["python".into(), "train.py".into()],
            exit: Exit {
                code: Some(0),
                signal: None,
            },
            wall_s: 2.0,
            ..Profile::default()
        };
        p.labels.insert("rank".into(), rank.into());
        p.labels.insert("world_size".into(), "2".into());
        p.memory.peak_heap_bytes = peak;
        p.memory.timeline = vec![
            MemorySample {
                t_s: 0.0,
                heap_bytes: 0,
                rss_bytes: 0,
                ..MemorySample::default()
            },
            MemorySample {
                t_s: 1.0,
                heap_bytes: peak,
                rss_bytes: peak,
                ..MemorySample::default()
            },
        ];
        p.memory.peak_rss_bytes = peak;
        p.processes = vec![Process {
            pid: 10,
            peak_heap_bytes: peak,
            ..Process::default()
        }];
        p.stack_frames = vec![StackFrame {
            file: "/train.py".into(),
            function: "step".into(),
            line: 3,
        }];
        p.stacks = vec![StackStats {
            frames: vec![0],
            alloc_bytes: line_bytes,
            ..StackStats::default()
        }];
        p.lines = vec![LineStats {
            file: "/train.py".into(),
            line: 3,
            function: "step".into(),
            measures: Measures {
                alloc_bytes: line_bytes,
                cpu_python_s: 1.0,
                ..Measures::default()
            },
            ..LineStats::default()
        }];
        p
    }

    #[test]
    fn two_ranks_are_summed_and_kept_apart() {
        let merged = merge(vec![
            Input {
                source: "r0.json".into(),
                profile: rank_profile("0", 100, 40),
            },
            Input {
                source: "r1.json".into(),
                profile: rank_profile("1", 300, 60),
            },
        ]);
        assert_eq!(merged.ranks.len(), 2);
        assert_eq!(merged.exit.code, Some(0));
        assert_eq!(merged.ranks[0].name, "rank 0");
        assert_eq!(merged.ranks[1].peak_heap_bytes, 300);
        assert_eq!(merged.memory.peak_heap_bytes, 400);
        assert_eq!(merged.lines.len(), 1);
        assert_eq!(merged.lines[0].measures.alloc_bytes, 100);
        assert_eq!(merged.lines[0].measures.cpu_python_s, 2.0);
        assert_eq!(
            merged.stack_frames.len(),
            1,
            "shared frames are not repeated"
        );
        assert_eq!(merged.stacks.len(), 2);
        assert_eq!(merged.processes[1].rank.as_deref(), Some("rank 1"));
        assert_eq!(
            merged.labels.get("world_size").map(String::as_str),
            Some("2")
        );
        assert!(!merged.labels.contains_key("rank"));
        let top = merged.memory.timeline.iter().map(|s| s.heap_bytes).max();
        assert_eq!(top, Some(400));
        assert_eq!(
            merged.memory.timeline.last().unwrap().heap_bytes,
            0,
            "both runs ended"
        );
        assert_eq!(
            super::super::invariants::violations(&merged),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_failed_rank_sets_the_exit() {
        let mut bad = rank_profile("1", 1, 1);
        bad.exit = Exit {
            code: None,
            signal: Some(9),
        };
        let merged = merge(vec![
            Input {
                source: "a".into(),
                profile: rank_profile("0", 1, 1),
            },
            Input {
                source: "b".into(),
                profile: bad,
            },
        ]);
        assert_eq!(merged.exit.signal, Some(9));
    }
}
