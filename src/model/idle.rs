//! Which waiting time counts on lines, functions, stacks and the timeline. Pure.
//!
//! By default (the convention of the profilers users know: py-spy and Scalene leave idle
//! threads out), waiting counts for each process's main thread, and for another thread only
//! while the main thread is waiting too: then the program as a whole is held up, and a helper
//! that waits (on I/O, a lock, a queue another thread fills) is part of what it waits for.
//! Helpers idle while the main thread computes (queue feeders, pool managers, a `get()` with
//! nothing to do) hold nothing up: their waiting stays in the per-thread table only. So does
//! waiting outside profiled code (no frame of the user's code on the stack: a DataLoader or
//! pool worker's loop waiting for work), except the launched program's own main thread's.
//! `--idle` counts every thread's waiting.
//!
//! "While the main thread waits" is measured per bucket of time: the share of the bucket the
//! main thread spent waiting, from its waiting samples, spread over the span each covers. A
//! helper's waiting sample counts that share of its weight (averaged over its own span).

use std::collections::HashMap;

use mlprof_wire::sample_flags;

use super::filter::Filter;
use super::places::{place_of, Lines, Place, INTERPRETER, NATIVE_THREAD, OUTSIDE};
use crate::recording::{ChannelSummary, CpuSample, Recording};

/// Shortest bucket: five collector ticks.
const MIN_BUCKET_NS: u64 = 100_000_000;

/// How much of each sample's weight counts on lines: `[channel][sample]`, in nanoseconds. CPU
/// samples count in full; waiting samples by the convention above (`all`: in full). `places`
/// is where each sample goes by its own frames (`cpu::places`).
pub fn counted(rec: &Recording, filter: &Filter, places: &[Vec<Place>]) -> Vec<Vec<u64>> {
    let all = filter.idle;
    let bucket = bucket_ns(rec);
    rec.channels
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let mut weights = counted_in(c, all, bucket);
            if !all {
                outside_profiled_code(rec, ci, &places[ci], &mut weights);
                inherited_frames_only(rec, ci, filter, &mut weights);
                for (i, _) in launcher_waits(rec, ci) {
                    weights[i] = 0;
                }
            }
            weights
        })
        .collect()
}

/// The buckets of time waiting is judged in: five collector ticks at least, and no finer
/// than the windows old events were merged into.
fn bucket_ns(rec: &Recording) -> u64 {
    rec.channels
        .iter()
        .map(|c| c.window_ns)
        .chain([MIN_BUCKET_NS, (rec.wall_ns / 1000).next_power_of_two()])
        .max()
        .unwrap_or(MIN_BUCKET_NS)
        .max(1)
}

/// When each process's worker processes (its descendants) were computing: a bucket counts
/// when they used at least a tenth of a CPU in it, or wanted to (their CPU and their time
/// waiting for a CPU in the run queue: on a machine loaded beyond its cores, workers that
/// compute all along get only a small share of one). A waiting sample of the process stamped
/// in such a bucket is waiting for its workers (a DataLoader's loop starved of batches).
pub struct WorkersBusy {
    bucket: u64,
    busy: Vec<std::collections::HashSet<u64>>,
}

impl WorkersBusy {
    /// From the descendants' CPU samples, per channel.
    pub fn of(rec: &Recording) -> WorkersBusy {
        let bucket = bucket_ns(rec);
        let mut cpu: HashMap<u32, HashMap<u64, u64>> = HashMap::new();
        for c in &rec.channels {
            let own = cpu.entry(c.pid).or_default();
            for s in c.samples.iter().filter(|s| !waiting(s)) {
                *own.entry(s.t_ns / bucket).or_default() += s.weight_ns;
            }
            // Queued only where the process ran too (woken for little work, as an idle
            // worker is, it queues a little at each wake-up on a loaded machine).
            for &(t_ns, _, ns) in &c.queued {
                if let Some(busy) = own.get_mut(&(t_ns / bucket)) {
                    *busy += ns;
                }
            }
        }
        let parent: HashMap<u32, u32> = rec.channels.iter().map(|c| (c.pid, c.ppid)).collect();
        let mut busy = vec![std::collections::HashSet::new(); rec.channels.len()];
        for (ci, c) in rec.channels.iter().enumerate() {
            let mut per_bucket: HashMap<u64, u64> = HashMap::new();
            for d in rec
                .channels
                .iter()
                .filter(|d| descends(&parent, d.pid, c.pid))
            {
                for (&b, &ns) in cpu.get(&d.pid).into_iter().flatten() {
                    *per_bucket.entry(b).or_default() += ns;
                }
            }
            busy[ci] = per_bucket
                .into_iter()
                .filter(|&(_, ns)| ns >= bucket / 10)
                .map(|(b, _)| b)
                .collect();
        }
        WorkersBusy { bucket, busy }
    }

    /// Whether channel `ci`'s workers were computing at `t_ns`.
    pub fn at(&self, ci: usize, t_ns: u64) -> bool {
        self.busy[ci].contains(&(t_ns / self.bucket))
    }
}

/// Whether `pid` descends from `ancestor` (by the channels' parent ids).
fn descends(parent: &HashMap<u32, u32>, mut pid: u32, ancestor: u32) -> bool {
    if pid == ancestor {
        return false;
    }
    for _ in 0..64 {
        match parent.get(&pid) {
            Some(&pp) if pp == ancestor => return true,
            Some(&pp) if pp != pid => pid = pp,
            _ => return false,
        }
    }
    false
}

/// Waiting with no profiled frame counts only for the launched program's main thread.
fn outside_profiled_code(rec: &Recording, ci: usize, places: &[Place], weights: &mut [u64]) {
    let channel = &rec.channels[ci];
    for ((s, place), w) in channel.samples.iter().zip(places).zip(weights) {
        let root_main = channel.pid == rec.child_pid && s.tid == channel.pid;
        if waiting(s)
            && !root_main
            && [OUTSIDE, INTERPRETER, NATIVE_THREAD].contains(&place.file.as_str())
        {
            *w = 0;
        }
    }
}

/// A launcher waits for the job it started, and that is not cost of its lines (torchrun's
/// agent, `mpirun`, `accelerate launch`, a shell or a wrapper in `subprocess.run`): a process
/// whose main thread, while any of its descendants was alive, spent at least 90% of its
/// sampled time waiting, *and* which either runs no Python, or started ranks of a distributed
/// job without being one, or spent 90% of its whole life waiting for its children to end
/// (`Popen.wait`, `Process.join`: a wrapper, not torch.compile waiting for g++ between its
/// own work).
/// A main thread that waits for data from its workers (a DataLoader, `client.gather`,
/// `ray.get`, the wait for `torch.compile`'s compiler) is none of these: its waiting stays on
/// its lines. The launcher's main-thread waiting samples in those stretches: (index, ns).
pub fn launcher_waits(rec: &Recording, ci: usize) -> Vec<(usize, u64)> {
    let channel = &rec.channels[ci];
    let alive = descendants_alive(rec, channel.pid);
    if alive.is_empty() {
        return Vec::new();
    }
    let inside = |t: u64| alive.iter().any(|a| a.from <= t && t < a.to);
    let main: Vec<(usize, &CpuSample)> = channel
        .samples
        .iter()
        .enumerate()
        .filter(|(_, s)| s.tid == channel.pid && inside(s.t_ns))
        .collect();
    let total: u64 = main.iter().map(|(_, s)| s.weight_ns).sum();
    let waits: Vec<(usize, &CpuSample)> = main.into_iter().filter(|(_, s)| waiting(s)).collect();
    let waited: u64 = waits.iter().map(|(_, s)| s.weight_ns).sum();
    if total == 0 || (waited as f64) < 0.9 * total as f64 {
        return Vec::new();
    }
    let no_python = waits.iter().all(|(_, s)| s.frames.is_empty());
    let starts_ranks = channel.rank.is_none() && alive.iter().any(|a| a.ranked);
    // Waiting for children to end, for most of its whole life: a wrapper around the job. A
    // process that also works a good part of its life and waits for helper programs in
    // between (torch.compile waiting for g++) keeps that waiting on its lines.
    let waits_for_ends = || {
        let ending: u64 = waits
            .iter()
            .filter(|(_, s)| waits_for_children_to_end(channel, s))
            .map(|(_, s)| s.weight_ns)
            .sum();
        let life: u64 = channel
            .samples
            .iter()
            .filter(|s| s.tid == channel.pid)
            .map(|s| s.weight_ns)
            .sum();
        ending as f64 >= 0.5 * waited as f64 && ending as f64 >= 0.9 * life as f64
    };
    if !(no_python || starts_ranks || waits_for_ends()) {
        return Vec::new();
    }
    waits.into_iter().map(|(i, s)| (i, s.weight_ns)).collect()
}

/// Whether a waiting sample's stack is inside a call that waits for child processes to end:
/// `subprocess.Popen.wait` / `communicate` (and so `subprocess.run` / `call`), or
/// `multiprocessing`'s `Process.join`. Names only (before 3.11 a code object's qualified name
/// is its bare name).
fn waits_for_children_to_end(channel: &ChannelSummary, s: &CpuSample) -> bool {
    s.frames.iter().any(|(id, _)| {
        let Some(code) = channel.codes.get(id) else {
            return false;
        };
        let name = code.qualname.rsplit('.').next().unwrap_or("");
        let file = &code.filename;
        (file.ends_with("/subprocess.py") && ["wait", "communicate"].contains(&name))
            || (file.ends_with("/multiprocessing/process.py") && name == "join")
    })
}

/// A descendant's lifetime, and whether it is a rank of a distributed job.
struct Descendant {
    from: u64,
    to: u64,
    ranked: bool,
}

/// When the descendants of `pid` (by the channels' parent ids) were alive (ns from launch).
fn descendants_alive(rec: &Recording, pid: u32) -> Vec<Descendant> {
    let parent: HashMap<u32, u32> = rec.channels.iter().map(|c| (c.pid, c.ppid)).collect();
    rec.channels
        .iter()
        .filter(|c| descends(&parent, c.pid, pid))
        .map(|c| Descendant {
            from: c.start_ns,
            to: c.exit_ns.unwrap_or(rec.wall_ns).max(c.start_ns),
            ranked: c.rank.is_some(),
        })
        .collect()
}

/// A fork child's waiting whose profiled frames are all inherited (below the frame that
/// forked) is a helper idling in a library's machinery: it counts 0.
fn inherited_frames_only(rec: &Recording, ci: usize, filter: &Filter, weights: &mut [u64]) {
    let channel = &rec.channels[ci];
    let depth = channel.fork_depth as usize;
    if !channel.forked || depth == 0 {
        return;
    }
    let mut lines = Lines::new(rec, ci);
    for (s, w) in channel.samples.iter().zip(weights) {
        // Inherited: the outermost `depth - 1` frames (the forking frame goes on in the child).
        if !waiting(s) || *w == 0 || s.frames.len() < depth {
            continue;
        }
        let own = &s.frames[..s.frames.len() - (depth - 1)];
        if place_of(own, s.tid, channel.pid, &mut lines, filter).file == OUTSIDE {
            *w = 0;
        }
    }
}

fn waiting(s: &CpuSample) -> bool {
    s.flags & sample_flags::WAITING != 0
}

fn counted_in(channel: &ChannelSummary, all: bool, bucket: u64) -> Vec<u64> {
    let main = channel.pid;
    let helper_waits = |s: &CpuSample| waiting(s) && s.tid != main;
    if all || !channel.samples.iter().any(helper_waits) {
        return channel.samples.iter().map(|s| s.weight_ns).collect();
    }
    // Nanoseconds the main thread waited in each bucket.
    let end = channel
        .samples
        .iter()
        .map(|s| s.t_ns.saturating_add(s.weight_ns))
        .max()
        .unwrap_or(0);
    let buckets = usize::try_from(end / bucket + 1)
        .unwrap_or(usize::MAX)
        .min(1 << 20);
    let mut main_waits = vec![0u64; buckets];
    for s in channel
        .samples
        .iter()
        .filter(|s| waiting(s) && s.tid == main)
    {
        spread(s.t_ns, s.weight_ns, bucket, |b, ns| {
            if let Some(w) = main_waits.get_mut(b) {
                *w += ns;
            }
        });
    }
    channel
        .samples
        .iter()
        .map(|s| {
            if !helper_waits(s) {
                return s.weight_ns;
            }
            let mut held = 0.0;
            spread(s.t_ns, s.weight_ns, bucket, |b, ns| {
                let share = main_waits.get(b).map_or(0.0, |&w| w as f64 / bucket as f64);
                held += ns as f64 * share.min(1.0);
            });
            held.round() as u64
        })
        .collect()
}

/// Split `[t, t + len)` over the buckets it covers: `f(bucket, nanoseconds in it)`.
fn spread(t: u64, len: u64, bucket: u64, mut f: impl FnMut(usize, u64)) {
    let end = t.saturating_add(len);
    let mut at = t;
    while at < end {
        let b = at / bucket;
        let next = (b + 1).saturating_mul(bucket).min(end);
        f(usize::try_from(b).unwrap_or(usize::MAX), next - at);
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Filter;

    fn counted_with(rec: &Recording, filter: &Filter) -> Vec<Vec<u64>> {
        super::counted(rec, filter, &crate::model::cpu::places(rec, filter))
    }

    /// A sample at a line of the user's code (code object 1).
    fn sample(t_ms: u64, tid: u32, weight_ms: u64, waiting: bool) -> CpuSample {
        CpuSample {
            t_ns: t_ms * 1_000_000,
            tid,
            weight_ns: weight_ms * 1_000_000,
            flags: if waiting { sample_flags::WAITING } else { 0 },
            frames: vec![(1, 0)],
            ..CpuSample::default()
        }
    }

    fn recording(samples: Vec<CpuSample>) -> Recording {
        let code = crate::recording::CodeInfo {
            firstlineno: 3,
            filename: "/w/t.py".into(),
            qualname: "f".into(),
            ..Default::default()
        };
        Recording {
            wall_ns: 2_000_000_000,
            child_pid: 7,
            channels: vec![ChannelSummary {
                pid: 7,
                python: Some("3.10.0".into()),
                codes: [(1, code)].into(),
                samples,
                ..ChannelSummary::default()
            }],
            ..Recording::default()
        }
    }

    #[test]
    fn helpers_wait_on_lines_only_while_the_main_thread_waits() {
        let mut samples = Vec::new();
        // 0-1 s: the main thread computes; 1-2 s: it waits (a join). A helper waits all along.
        for i in 0..100 {
            samples.push(sample(10 * i, 7, 10, false));
            samples.push(sample(1000 + 10 * i, 7, 10, true));
        }
        for i in 0..100 {
            samples.push(sample(20 * i, 8, 20, true));
        }
        let rec = recording(samples);
        let counted = counted_with(&rec, &Filter::default());
        let helper: u64 = rec.channels[0]
            .samples
            .iter()
            .zip(&counted[0])
            .filter(|(s, _)| s.tid == 8)
            .map(|(_, &c)| c)
            .sum();
        assert_eq!(helper, 1_000_000_000, "the second half only");
        let main: u64 = counted[0][..200].iter().sum();
        assert_eq!(main, 2_000_000_000, "the main thread's time all counts");
        let all = counted_with(
            &rec,
            &Filter {
                idle: true,
                ..Filter::default()
            },
        );
        assert_eq!(all[0].iter().sum::<u64>(), 4_000_000_000);
    }

    /// A parent (pid 7) whose main thread waits 2 s at code object `code` while a child
    /// (pid 9, `rank` or none) computes: the parent's waiting counted on its lines.
    fn parent_waiting_in(code: crate::recording::CodeInfo, rank: bool) -> u64 {
        let samples = (0..100).map(|i| sample(20 * i, 7, 20, true)).collect();
        let mut rec = recording(samples);
        rec.channels[0].codes.insert(2, code);
        for s in &mut rec.channels[0].samples {
            s.frames.insert(0, (2, 0));
        }
        let mut child = ChannelSummary {
            pid: 9,
            ppid: 7,
            start_ns: 0,
            exit_ns: Some(2_000_000_000),
            rank: rank.then_some(crate::recording::Ranked {
                rank: 0,
                local_rank: None,
                world_size: None,
            }),
            ..rec.channels[0].clone()
        };
        child.samples = (0..100).map(|i| sample(20 * i, 9, 20, false)).collect();
        rec.channels.push(child);
        counted_with(&rec, &Filter::default())[0].iter().sum()
    }

    fn code(file: &str, qualname: &str) -> crate::recording::CodeInfo {
        crate::recording::CodeInfo {
            filename: file.into(),
            qualname: qualname.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_main_thread_waiting_for_its_workers_data_keeps_its_waiting_on_its_lines() {
        // A DataLoader's `_try_get_data` in a queue's `get`, `ray.get`, `Future.result`.
        for (file, name) in [
            ("/usr/lib/python3.11/multiprocessing/queues.py", "Queue.get"),
            (
                "/usr/lib/python3.11/concurrent/futures/_base.py",
                "Future.result",
            ),
            ("/usr/lib/python3.11/threading.py", "Event.wait"),
        ] {
            assert_eq!(
                parent_waiting_in(code(file, name), false),
                2_000_000_000,
                "{name}"
            );
        }
    }

    #[test]
    fn a_process_that_works_and_waits_for_a_compiler_keeps_its_waiting() {
        // torch.compile: 2 s waiting in `subprocess.run` for g++ after 1 s of its own work.
        let mut samples: Vec<CpuSample> = (0..50).map(|i| sample(20 * i, 7, 20, false)).collect();
        samples.extend((0..100).map(|i| sample(1000 + 20 * i, 7, 20, true)));
        let mut rec = recording(samples);
        rec.wall_ns = 3_000_000_000;
        let popen = code("/usr/lib/python3.11/subprocess.py", "Popen.communicate");
        rec.channels[0].codes.insert(2, popen);
        for s in rec.channels[0].samples.iter_mut().filter(|s| waiting(s)) {
            s.frames.insert(0, (2, 0));
        }
        let mut child = rec.channels[0].clone();
        (child.pid, child.ppid, child.start_ns) = (9, 7, 1_000_000_000);
        child.exit_ns = Some(3_000_000_000);
        child.samples = (0..100)
            .map(|i| sample(1000 + 20 * i, 9, 20, false))
            .collect();
        rec.channels.push(child);
        assert!(launcher_waits(&rec, 0).is_empty());
    }

    #[test]
    fn a_launchers_waiting_for_its_job_is_not_on_its_lines() {
        // Waiting for children to end: `subprocess.run`, `Popen.wait`, `Process.join` (3.9's
        // bare names too).
        for (file, name) in [
            ("/usr/lib/python3.11/subprocess.py", "Popen.wait"),
            ("/usr/lib/python3.9/subprocess.py", "communicate"),
            (
                "/usr/lib/python3.11/multiprocessing/process.py",
                "BaseProcess.join",
            ),
        ] {
            assert_eq!(parent_waiting_in(code(file, name), false), 0, "{name}");
        }
        // Starting ranks of a distributed job, waiting in anything (torchrun's agent sleeps).
        assert_eq!(
            parent_waiting_in(code("/w/api.py", "SimpleElasticAgent._invoke_run"), true),
            0
        );
    }

    #[test]
    fn a_launcher_without_python_waits_off_its_lines() {
        let mut samples: Vec<CpuSample> = (0..100).map(|i| sample(20 * i, 7, 20, true)).collect();
        for s in &mut samples {
            s.frames.clear();
        }
        let mut rec = recording(samples);
        let mut child = rec.channels[0].clone();
        (child.pid, child.ppid, child.exit_ns) = (9, 7, Some(2_000_000_000));
        child.samples = (0..100).map(|i| sample(20 * i, 9, 20, false)).collect();
        rec.channels.push(child);
        assert_eq!(launcher_waits(&rec, 0).len(), 100);
    }

    #[test]
    fn spans_are_split_at_bucket_edges() {
        let mut parts = Vec::new();
        spread(90, 30, 100, |b, ns| parts.push((b, ns)));
        assert_eq!(parts, [(0, 10), (1, 20)]);
        parts.clear();
        spread(u64::MAX - 5, 100, 100, |b, ns| parts.push((b, ns)));
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), 5);
    }

    #[test]
    fn waiting_outside_profiled_code_counts_only_for_the_launched_programs_main_thread() {
        let mut root_main = sample(0, 7, 20, true);
        root_main.frames.clear();
        let mut helper = sample(0, 8, 20, true);
        helper.frames.clear();
        let mut rec = recording(vec![root_main.clone(), helper.clone()]);
        // A pool worker: its main thread waits for work in library code only.
        let mut worker = rec.channels[0].clone();
        worker.pid = 9;
        worker.samples = vec![CpuSample {
            tid: 9,
            ..root_main
        }];
        rec.channels.push(worker);
        let counted = counted_with(&rec, &Filter::default());
        assert_eq!(counted[0], [20_000_000, 0]);
        assert_eq!(counted[1], [0]);
    }
}
