//! The process tree's footprint at each tick, from `/proc`, at a bounded cost.
//!
//! Each process's resident set (`statm`) and CPU time (`stat`) are read at every tick, its
//! high-water mark (`status`) every [`HWM_EVERY`] ticks; the command's own process's CPU time
//! only with its high-water mark (its CPU at the end is the kernel's account of the reaped
//! process; `stat` costs in proportion to its threads). With two processes or more, each
//! one's RSS counts at its share of own pages (PSS / RSS of `smaps_rollup`), so that pages a
//! fork child shares with its parent count once in the tree's sum, not once per process.
//!
//! `smaps_rollup` walks every page of the process: 0.1 ms for a bare Python, 5–17 ms for one
//! that imported torch. Read for every process ten times a second, it cost a third of the
//! machine on a torch.compile job. So each kind of read has a [`Pace`]: PSS readings take at
//! most [`PSS_SHARE`] of one CPU, those never made first, then the oldest, each process at
//! most every [`PSS_EVERY_NS`]. Until its first, a fork child counts only what it made itself
//! (its channel's heap beyond what it inherited, and its mappings) when first seen, and what
//! it gained since (the rest it shares with its parent), an exec'd process its anonymous
//! pages (its file pages are libraries, most likely shared). The other readings take at most
//! [`PROC_SHARE`], except the command's own process and any process read for the first time,
//! which are always read. A process not read at a tick counts with its last reading.

use std::collections::BTreeMap;

mod shares;

pub use shares::Fork;
use shares::Share;

use super::pace::Pace;
use super::procfs;
use crate::recording::{ProcSummary, Tick};

/// The kernel's RSS high-water mark is read every this many ticks (and the current RSS at every
/// tick), because its file is several times costlier to read.
pub const HWM_EVERY: u64 = 5;
/// Share of one CPU that PSS readings may take.
pub const PSS_SHARE: f64 = 0.002;
/// Share of one CPU the other `/proc` readings of processes other than the command's own may
/// take.
pub const PROC_SHARE: f64 = 0.002;
/// A process's PSS is read at most this often (ns): its share of own pages changes slowly
/// (as a fork child writes to pages it shares).
pub const PSS_EVERY_NS: u64 = 100_000_000;
/// What each pace may spend at once, before time has earned it: the first readings.
const BURST_NS: u64 = 10_000_000;

/// What is kept of one process between ticks.
#[derive(Clone, Copy, Debug, Default)]
struct Last {
    rss_bytes: u64,
    anon_bytes: u64,
    /// When it was read (ns from launch).
    read_ns: u64,
    /// Its share of own pages at its last PSS reading, if it had one.
    share: Option<Share>,
    /// What its last PSS reading cost (ns of the collector's CPU; 0: never read).
    share_cost_ns: u64,
    /// Its PSS is read at the next tick whatever the budget (a fork child whose assumed
    /// share the other readings do not agree with).
    force: bool,
}

/// The footprint's state between ticks.
pub struct Footprint {
    last: BTreeMap<u32, Last>,
    /// Processes whose `/proc` directory was gone at a reading: not read again.
    gone: std::collections::BTreeSet<u32>,
    /// Processes that are fork images (not exec'd), as their channels say.
    forks: BTreeMap<u32, Fork>,
    /// When a fork child was last first seen (ns from launch).
    fork_seen_ns: u64,
    pss: Pace,
    proc: Pace,
}

impl Footprint {
    /// A footprint whose budgets count from `now_ns`.
    pub fn new(now_ns: u64) -> Self {
        Self {
            last: BTreeMap::new(),
            gone: Default::default(),
            forks: Default::default(),
            fork_seen_ns: 0,
            pss: Pace::new(PSS_SHARE, BURST_NS, now_ns),
            proc: Pace::new(PROC_SHARE, BURST_NS, now_ns),
        }
    }

    /// The processes of the tree that are fork images now (a fork child that has not exec'd:
    /// it shares most of its pages with its parent at first), with what each made itself.
    pub fn set_forks(&mut self, forks: BTreeMap<u32, Fork>) {
        self.forks = forks;
    }

    /// CPU spent reading `/proc` so far (ns).
    pub fn spent_ns(&self) -> u64 {
        self.pss.spent_ns() + self.proc.spent_ns()
    }

    /// One tick: read `/proc` for `pids` (`child` first: the command's own process) within
    /// the budgets, update `procs`, and sum the tree's footprint. `heap_bytes` and
    /// `mapped_bytes` come from the channels.
    pub fn poll(
        &mut self,
        pids: &[u32],
        child: u32,
        procs: &mut BTreeMap<u32, ProcSummary>,
        now: u64,
        with_hwm: bool,
    ) -> (u64, u64) {
        let mut left = false;
        self.last.retain(|pid, _| {
            let kept = pids.contains(pid);
            if !kept {
                procfs::forget(*pid); // left the tree: its kept `/proc` files are closed
                left = true;
            }
            kept
        });
        if left {
            self.shares_due_again();
        }
        let tree = pids.len() > 1;
        // The command's process, then those never read, then the longest unread.
        let mut order: Vec<u32> = pids.to_vec();
        order.sort_by_key(|pid| {
            let last = self.last.get(pid).map_or(0, |l| l.read_ns + 1);
            (*pid != child, last)
        });
        let mut seen_forks = Vec::new();
        for pid in order {
            if self.gone.contains(&pid) {
                continue;
            }
            let first = !procs.contains_key(&pid);
            if pid != child && !first && !self.proc.allowed(now) {
                continue; // counts with its last reading
            }
            // The command's own process is reaped (its CPU comes from the kernel's account at
            // its end): its CPU time is read with the high-water mark only.
            let with_cpu = with_hwm || first || pid != child;
            let reading = self
                .proc
                .spend(|| procfs::read(pid, with_hwm || first, with_cpu));
            let Some(reading) = reading else {
                self.unreadable(pid, child);
                continue;
            };
            let fork = self.forks.get(&pid).copied();
            // What it made itself by its channel, or by how far its anonymous pages are past
            // its parent's now (its channel may not say yet what it allocated before it was
            // first seen), whichever is more.
            let made = fork.map(|f| {
                let parent = self.last.get(&f.parent).map_or(u64::MAX, |p| p.anon_bytes);
                f.made.max(reading.anon_bytes.saturating_sub(parent))
            });
            let last = self.last.entry(pid).or_default();
            (last.rss_bytes, last.anon_bytes, last.read_ns) =
                (reading.rss_bytes, reading.anon_bytes, now);
            match last.share {
                // A fork child first seen: its pages are its parent's until a reading says,
                // but for what it made itself since the fork (it may have allocated before it
                // was first seen), at most its anonymous pages.
                None if made.is_some() => {
                    seen_forks.push(pid);
                    let own = made.unwrap_or(0).min(reading.anon_bytes);
                    last.share = Some(Share {
                        own: own as f64 / reading.rss_bytes.max(1) as f64,
                        at_ns: now,
                        rss_bytes: reading.rss_bytes,
                        anon_bytes: reading.anon_bytes,
                        assumed: true,
                    })
                }
                // It has exec'd since: a new image, nothing of its parent's left.
                Some(share) if share.assumed && made.is_none() => last.share = None,
                _ => {}
            }
            let entry = procs.entry(pid).or_insert(ProcSummary {
                pid,
                ..ProcSummary::default()
            });
            entry.peak_rss_bytes = entry
                .peak_rss_bytes
                .max(reading.hwm_bytes)
                .max(reading.rss_bytes);
            entry.cpu_s = reading.cpu_s.unwrap_or(entry.cpu_s);
        }
        if !seen_forks.is_empty() {
            self.fork_seen_ns = now;
        }
        for pid in seen_forks {
            self.agree_with_fork(pid);
        }
        if tree {
            self.read_shares(now, child);
        }
        let mut rss_bytes = 0;
        let mut anon_bytes = 0;
        for last in self.last.values() {
            let (rss, anon) = match (tree, last.share) {
                (false, _) => (last.rss_bytes, last.anon_bytes),
                (true, Some(share)) => (
                    share.own_of(last.rss_bytes, share.rss_bytes),
                    share.own_of(last.anon_bytes, share.anon_bytes),
                ),
                // Not read yet: its anonymous pages are its own, its file pages (libraries)
                // most likely shared with the process that mapped them first.
                (true, None) => (last.anon_bytes, last.anon_bytes),
            };
            rss_bytes += rss;
            anon_bytes += anon;
        }
        (rss_bytes, anon_bytes)
    }

    /// Before the first PSS reading of a tick, the processes not read in it are read now
    /// (`statm` only): a share read now goes with what the others hold now. A DataLoader's
    /// parent read as its workers ended owned all its pages again, beside the workers' last
    /// readings from before they ended (the tree at 2.1 GB, its largest process 0.97 GB).
    fn refresh_others(&mut self, now: u64) {
        let stale: Vec<u32> = (self.last.iter())
            .filter(|(_, l)| l.read_ns < now)
            .map(|(&pid, _)| pid)
            .collect();
        let mut left = false;
        for pid in stale {
            match self.proc.spend(|| procfs::read(pid, false, false)) {
                Some(reading) => {
                    let last = self.last.entry(pid).or_default();
                    (last.rss_bytes, last.anon_bytes, last.read_ns) =
                        (reading.rss_bytes, reading.anon_bytes, now);
                }
                None => {
                    self.unreadable(pid, 0);
                    left = true;
                }
            }
        }
        if left {
            self.shares_due_again();
        }
    }

    /// `pid` could not be read: counted no more, and never read again once it is gone (the
    /// command's own process, `child`, is reaped by us: read until then).
    fn unreadable(&mut self, pid: u32, child: u32) {
        self.last.remove(&pid);
        if pid != child && !procfs::alive(pid) {
            self.gone.insert(pid);
            procfs::forget(pid);
        }
    }

    /// A process left the tree: pages the others shared with it are theirs now, so their
    /// shares are read again first (after any never read).
    fn shares_due_again(&mut self) {
        for share in self.last.values_mut().filter_map(|l| l.share.as_mut()) {
            share.at_ns = 0;
        }
    }
}

/// One tick's figures for the tick list.
pub fn tick(now: u64, heap_bytes: u64, mapped_bytes: u64, (rss, anon): (u64, u64)) -> Tick {
    Tick {
        t_ns: now,
        heap_bytes,
        rss_bytes: rss,
        mapped_bytes,
        anon_bytes: anon,
    }
}

#[cfg(test)]
mod tests;
