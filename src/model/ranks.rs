//! The ranks of a distributed job, compared. In one run, processes are grouped by the rank
//! their environment names (`RANK`, `SLURM_PROCID`, ...; a rank's DataLoader workers inherit
//! it), each rank attributed on its own ([`of_run`]); `mlprof merge` brings ranks from several
//! runs. [`compare`] then names the stragglers (lines where a rank spends meaningfully more
//! than the other ranks' median), the memory imbalance (a rank whose heap peak is above the
//! others', and the line holding the difference) and each line's spread across ranks. Pure.

use std::collections::{BTreeMap, HashMap};

use super::filter::Filter;
use super::places::Lines;
use super::profile::{
    LineStats, MemoryImbalance, Process, Profile, Rank, RankLine, Spread, Straggler,
};
use crate::recording::{ChannelSummary, Recording};
use crate::symbolize::NativeNames;

/// Lines kept per rank (most time first), besides those holding memory at its peak.
const LINES_PER_RANK: usize = 200;
/// Smallest excess worth naming, seconds.
const MIN_EXCESS_S: f64 = 0.1;
/// Smallest heap excess worth naming, bytes (and 5% of the median).
const MIN_EXCESS_BYTES: u64 = 16 << 20;
/// Most stragglers listed.
const MAX_STRAGGLERS: usize = 20;
/// Sampling granularity of waiting time (the collector's tick), seconds.
const TICK_S: f64 = 0.02;

/// Python functions of collective communication (in a file under a `distributed` package:
/// torch.distributed, or mpi4py's equivalents).
const COLLECTIVES: [&str; 14] = [
    "all_reduce",
    "allreduce",
    "barrier",
    "broadcast",
    "all_gather",
    "allgather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "alltoall",
    "gather",
    "scatter",
    "wait",
];
/// Native symbol parts of collective communication libraries.
const COLLECTIVE_NATIVE: [&str; 5] = ["gloo::", "nccl", "MPI_", "c10d::ProcessGroup", "ompi_coll"];

/// The ranks of one run, when its processes name two or more: each with its processes, its
/// time by kind and in collectives, its peaks and its lines.
pub fn of_run(
    rec: &Recording,
    natives: &NativeNames,
    filter: &Filter,
    processes: &[Process],
) -> Vec<Rank> {
    let mut by_rank: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (ci, c) in rec.channels.iter().enumerate() {
        if let Some(r) = c.rank {
            by_rank.entry(r.rank).or_default().push(ci);
        }
    }
    if by_rank.len() < 2 {
        return Vec::new();
    }
    by_rank
        .into_iter()
        .map(|(rank, channels)| one_rank(rec, natives, filter, processes, rank, &channels))
        .collect()
}

fn one_rank(
    rec: &Recording,
    natives: &NativeNames,
    filter: &Filter,
    processes: &[Process],
    rank: u32,
    channels: &[usize],
) -> Rank {
    // The same recording with only this rank's events (other channels keep their code
    // objects, which fork children look up, and their indices, which `natives` is keyed by).
    let view = Recording {
        channels: rec
            .channels
            .iter()
            .enumerate()
            .map(|(ci, c)| {
                if channels.contains(&ci) {
                    c.clone()
                } else {
                    c.without_events()
                }
            })
            .collect(),
        wall_ns: rec.wall_ns,
        child_pid: rec.child_pid,
        ..Recording::default()
    };
    let places = super::cpu::places(&view, filter);
    let counted = super::idle::counted(&view, filter, &places);
    let mut acc = HashMap::new();
    let tree = processes.iter().map(|p| p.pid).collect();
    let mut gpu = super::gpu::Joiner::new(&view.gpu, &tree); // no GPU polls: not per rank
    let donors = super::pooljoin::donors(&view, &places);
    super::cpu::add(
        &view, natives, &places, &donors, &counted, &mut acc, &mut gpu,
    );
    super::memory::add(&view, filter, &places, &donors, &mut acc);
    let collective_s = collective_ns(&view, natives, channels, &counted) as f64 / 1e9;
    let (lines, _) = super::places::summarise(acc, rec.wall_ns);
    let pids: Vec<u32> = {
        let mut p: Vec<u32> = channels.iter().map(|&ci| rec.channels[ci].pid).collect();
        p.sort_unstable();
        p.dedup();
        p
    };
    let procs: Vec<&Process> = processes.iter().filter(|p| pids.contains(&p.pid)).collect();
    let main = procs.iter().min_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let ranked = channels.iter().find_map(|&ci| rec.channels[ci].rank);
    let mut labels = BTreeMap::new();
    labels.insert("rank".to_string(), rank.to_string());
    if let Some(local) = ranked.and_then(|r| r.local_rank) {
        labels.insert("local_rank".to_string(), local.to_string());
    }
    if let Some(size) = ranked.and_then(|r| r.world_size) {
        labels.insert("world_size".to_string(), size.to_string());
    }
    let sum = |f: fn(&LineStats) -> f64| lines.iter().map(f).sum::<f64>();
    Rank {
        name: format!("rank {rank}"),
        source: String::new(),
        labels,
        command: main.map(|p| p.command.clone()).unwrap_or_default(),
        exit: main.map(|p| p.exit).unwrap_or_default(),
        wall_s: channels
            .iter()
            .map(|&ci| {
                let c = &rec.channels[ci];
                c.exit_ns.unwrap_or(rec.wall_ns).saturating_sub(c.start_ns)
            })
            .max()
            .unwrap_or(0) as f64
            / 1e9,
        cpu_s: procs.iter().map(|p| p.cpu_s).sum(),
        peak_heap_bytes: procs.iter().map(|p| own_peak(p)).max().unwrap_or(0),
        peak_rss_bytes: procs.iter().map(|p| p.peak_rss_bytes).max().unwrap_or(0),
        peak_gpu_memory_bytes: procs.iter().map(|p| p.peak_gpu_memory_bytes).sum(),
        gpu_available: rec.gpu.available,
        gpu_average_util_pct: 0.0,
        alloc_bytes: lines.iter().map(|l| l.measures.alloc_bytes).sum(),
        processes: procs.len(),
        dropped_events: channels.iter().map(|&ci| rec.channels[ci].dropped).sum(),
        rank: Some(rank),
        pids,
        cpu_python_s: sum(|l| l.measures.cpu_python_s),
        cpu_native_s: sum(|l| l.measures.cpu_native_s),
        waiting_s: sum(|l| l.measures.waiting_s),
        kernel_s: sum(|l| l.measures.kernel_s),
        collective_s,
        lines: rank_lines(&lines),
    }
}

/// A process's heap peak less what a fork child inherited.
fn own_peak(p: &Process) -> u64 {
    p.peak_heap_bytes.saturating_sub(p.inherited_heap_bytes)
}

/// A rank's lines as compared: the most time first, and every line holding memory at its peak.
pub fn rank_lines(lines: &[LineStats]) -> Vec<RankLine> {
    let time = |l: &LineStats| l.measures.time_s();
    let mut sorted: Vec<&LineStats> = lines.iter().filter(|l| l.line > 0).collect();
    sorted.sort_by(|a, b| time(b).total_cmp(&time(a)));
    sorted
        .iter()
        .enumerate()
        .filter(|(i, l)| *i < LINES_PER_RANK || l.measures.peak_bytes > 0)
        .map(|(_, l)| RankLine {
            file: l.file.clone(),
            line: l.line,
            function: l.function.clone(),
            time_s: time(l),
            waiting_s: l.measures.waiting_s,
            peak_bytes: l.measures.peak_bytes,
        })
        .collect()
}

/// Time (counted weights) of the rank's samples inside collective communication: a Python
/// frame of a collective in a `distributed` package, or a native function of gloo, NCCL or
/// MPI.
fn collective_ns(
    rec: &Recording,
    natives: &NativeNames,
    channels: &[usize],
    counted: &[Vec<u64>],
) -> u64 {
    let mut total = 0;
    for &ci in channels {
        let channel: &ChannelSummary = &rec.channels[ci];
        let mut lines = Lines::new(rec, ci);
        let mut memo: HashMap<u32, bool> = HashMap::new();
        for (s, &w) in channel.samples.iter().zip(&counted[ci]) {
            let native = natives.get(&(ci, s.ip)).and_then(|r| r.symbol.as_deref());
            let in_native = native.is_some_and(|n| COLLECTIVE_NATIVE.iter().any(|c| n.contains(c)));
            let in_python = s.frames.iter().any(|&(code, lasti)| {
                *memo.entry(code).or_insert_with(|| {
                    lines.line(code, lasti).is_some_and(|(info, _)| {
                        info.filename.contains("distributed")
                            && COLLECTIVES.contains(&short_name(&info.qualname))
                    })
                })
            });
            if in_native || in_python {
                total += w;
            }
        }
    }
    total
}

/// Seconds a profile's stacks spent in collective communication (for a merged rank, whose
/// samples are gone): stacks with a collective Python frame or a collective native leaf.
pub fn collective_s(p: &Profile) -> f64 {
    let frame_is_collective = |f: &super::profile::StackFrame| {
        (f.file.contains("distributed") && COLLECTIVES.contains(&short_name(&f.function)))
            || (f.line == 0 && COLLECTIVE_NATIVE.iter().any(|c| f.function.contains(c)))
    };
    let collective: Vec<bool> = p.stack_frames.iter().map(frame_is_collective).collect();
    p.stacks
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|&f| collective.get(f as usize).copied().unwrap_or(false))
        })
        .map(|s| s.cpu_python_s + s.cpu_native_s + s.kernel_s + s.waiting_s)
        .sum()
}

/// The last part of a qualified name (`ProcessGroup.allreduce` → `allreduce`).
fn short_name(qualname: &str) -> &str {
    qualname.rsplit('.').next().unwrap_or(qualname)
}

/// One line's figures in each rank: (seconds, of which waiting, bytes held at the peak).
type PerRank = Vec<(f64, f64, u64)>;
/// Every line of any rank: (file, line) → (function, figures per rank).
type PerLine = BTreeMap<(String, u32), (String, PerRank)>;

/// Fill the profile's stragglers, memory imbalance and line spreads from its ranks.
pub fn compare(p: &mut Profile) {
    if p.ranks.len() < 2 {
        return;
    }
    let interval = p.sample_interval_s.max(TICK_S);
    let ranks: Vec<(u32, &Rank)> = p
        .ranks
        .iter()
        .enumerate()
        .map(|(i, r)| (r.rank.unwrap_or(i as u32), r))
        .collect();
    // Per line: each rank's (time, waiting, held at peak).
    let mut per_line: PerLine = BTreeMap::new();
    for (i, (_, r)) in ranks.iter().enumerate() {
        for l in &r.lines {
            let entry = per_line
                .entry((l.file.clone(), l.line))
                .or_insert_with(|| (l.function.clone(), vec![(0.0, 0.0, 0); ranks.len()]));
            entry.1[i] = (l.time_s, l.waiting_s, l.peak_bytes);
        }
    }
    let mut stragglers = Vec::new();
    for ((file, line), (function, values)) in &per_line {
        for (i, &(t, waited, _)) in values.iter().enumerate() {
            let median = median_of_others(values.iter().map(|v| v.0), i);
            let excess = t - median;
            // Sampling noise: about sqrt(n) samples of `interval` each on either side.
            let noise = 3.0 * ((t + median) * interval).sqrt();
            if excess >= MIN_EXCESS_S.max(noise).max(0.1 * median) {
                stragglers.push(Straggler {
                    file: file.clone(),
                    line: *line,
                    function: function.clone(),
                    source: String::new(),
                    rank: ranks[i].0,
                    name: ranks[i].1.name.clone(),
                    excess_s: excess,
                    median_s: median,
                    waiting: waited >= 0.5 * t,
                });
            }
        }
    }
    stragglers.sort_by(|a, b| b.excess_s.total_cmp(&a.excess_s));
    stragglers.truncate(MAX_STRAGGLERS);
    p.stragglers = stragglers;
    p.memory_imbalance = memory_imbalance(&ranks, &per_line);
    let index: HashMap<(&str, u32), &PerRank> = per_line
        .iter()
        .map(|((f, l), (_, v))| ((f.as_str(), *l), v))
        .collect();
    for line in &mut p.lines {
        line.ranks = index
            .get(&(line.file.as_str(), line.line))
            .map(|values| spread(values, &ranks));
    }
    // Source text, where the line table has it (annotation fills the rest).
    let sources: HashMap<(&str, u32), &str> = p
        .lines
        .iter()
        .map(|l| ((l.file.as_str(), l.line), l.source.as_str()))
        .collect();
    for s in &mut p.stragglers {
        s.source = sources
            .get(&(s.file.as_str(), s.line))
            .unwrap_or(&"")
            .to_string();
    }
    for m in &mut p.memory_imbalance {
        m.source = sources
            .get(&(m.file.as_str(), m.line))
            .unwrap_or(&"")
            .to_string();
    }
}

fn memory_imbalance(ranks: &[(u32, &Rank)], per_line: &PerLine) -> Vec<MemoryImbalance> {
    let mut out = Vec::new();
    for (i, (number, r)) in ranks.iter().enumerate() {
        let median = median_of_others(ranks.iter().map(|(_, r)| r.peak_heap_bytes as f64), i);
        let excess = r.peak_heap_bytes as f64 - median;
        if excess < (MIN_EXCESS_BYTES as f64).max(0.05 * median) {
            continue;
        }
        let top = per_line
            .iter()
            .map(|((file, line), (function, values))| {
                let others = median_of_others(values.iter().map(|v| v.2 as f64), i);
                (values[i].2 as f64 - others, file, *line, function)
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let (line_excess, file, line, function) = match top {
            Some((e, f, l, func)) if e > 0.0 => (e as u64, f.clone(), l, func.clone()),
            _ => (0, String::new(), 0, String::new()),
        };
        out.push(MemoryImbalance {
            rank: *number,
            name: r.name.clone(),
            excess_bytes: excess as u64,
            median_bytes: median as u64,
            file,
            line,
            function,
            source: String::new(),
            line_excess_bytes: line_excess,
        });
    }
    out.sort_by_key(|m| std::cmp::Reverse(m.excess_bytes));
    out
}

/// The median of `values` without the one at `skip` (the lower middle for an even count).
fn median_of_others(values: impl Iterator<Item = f64>, skip: usize) -> f64 {
    let mut others: Vec<f64> = values
        .enumerate()
        .filter(|&(j, _)| j != skip)
        .map(|(_, v)| v)
        .collect();
    if others.is_empty() {
        return 0.0;
    }
    others.sort_by(f64::total_cmp);
    others[(others.len() - 1) / 2]
}

fn spread(values: &[(f64, f64, u64)], ranks: &[(u32, &Rank)]) -> Spread {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].0.total_cmp(&values[b].0));
    let (lo, hi) = (order[0], order[order.len() - 1]);
    Spread {
        min_s: values[lo].0,
        median_s: values[order[(order.len() - 1) / 2]].0,
        max_s: values[hi].0,
        min_rank: ranks[lo].0,
        max_rank: ranks[hi].0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(n: u32, peak: u64, lines: &[(u32, f64, f64, u64)]) -> Rank {
        Rank {
            name: format!("rank {n}"),
            rank: Some(n),
            peak_heap_bytes: peak,
            lines: lines
                .iter()
                .map(|&(line, time_s, waiting_s, peak_bytes)| RankLine {
                    file: "train.py".into(),
                    line,
                    function: "main".into(),
                    time_s,
                    waiting_s,
                    peak_bytes,
                })
                .collect(),
            ..Rank::default()
        }
    }

    #[test]
    fn the_slow_rank_and_the_waiting_rank_are_named_and_noise_is_not() {
        const MB: u64 = 1 << 20;
        let mut p = Profile {
            sample_interval_s: 0.01,
            ranks: vec![
                // line 10: compute alike; line 29: rank 1 sleeps; line 26: rank 0 waits for it.
                rank(
                    0,
                    500 * MB,
                    &[
                        (10, 5.0, 0.0, 100 * MB),
                        (26, 0.7, 0.65, 0),
                        (29, 0.0, 0.0, 0),
                    ],
                ),
                rank(
                    1,
                    700 * MB,
                    &[
                        (10, 5.05, 0.0, 300 * MB),
                        (26, 0.1, 0.05, 0),
                        (29, 0.6, 0.6, 0),
                    ],
                ),
            ],
            lines: vec![LineStats {
                file: "train.py".into(),
                line: 29,
                ..LineStats::default()
            }],
            ..Profile::default()
        };
        compare(&mut p);
        let named: Vec<(u32, u32, bool)> = p
            .stragglers
            .iter()
            .map(|s| (s.rank, s.line, s.waiting))
            .collect();
        assert_eq!(named, [(0, 26, true), (1, 29, true)], "{:?}", p.stragglers);
        assert!((p.stragglers[1].excess_s - 0.6).abs() < 1e-9);
        assert_eq!(p.memory_imbalance.len(), 1);
        let m = &p.memory_imbalance[0];
        assert_eq!((m.rank, m.line, m.excess_bytes), (1, 10, 200 * MB));
        let s = p.lines[0].ranks.as_ref().unwrap();
        assert_eq!((s.max_rank, s.min_rank), (1, 0));
    }

    #[test]
    fn one_rank_or_equal_ranks_give_nothing() {
        let mut p = Profile {
            ranks: vec![rank(0, 100, &[(1, 1.0, 0.0, 10)])],
            ..Profile::default()
        };
        compare(&mut p);
        assert!(p.stragglers.is_empty() && p.memory_imbalance.is_empty());
        p.ranks.push(rank(1, 100, &[(1, 1.02, 0.0, 10)]));
        compare(&mut p);
        assert!(p.stragglers.is_empty() && p.memory_imbalance.is_empty());
    }
}
