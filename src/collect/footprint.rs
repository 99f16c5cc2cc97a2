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
pub const PSS_SHARE: f64 = 0.003;
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
            // Pages the others shared with it are theirs now: their shares are read again
            // first (after any never read).
            for share in self.last.values_mut().filter_map(|l| l.share.as_mut()) {
                share.at_ns = 0;
            }
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
                self.last.remove(&pid);
                if pid != child && !procfs::alive(pid) {
                    self.gone.insert(pid);
                    procfs::forget(pid);
                }
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
mod tests {
    use super::*;

    /// `n` sleeping children of this test, killed when dropped.
    struct Kids(Vec<std::process::Child>);

    impl Drop for Kids {
        fn drop(&mut self) {
            for k in &mut self.0 {
                let _ = k.kill();
                let _ = k.wait();
            }
        }
    }

    /// This test's process, then `n` sleeping children (the kids, to keep until the end).
    fn tree(n: usize) -> (Vec<u32>, Kids) {
        let kids: Vec<_> = (0..n)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .expect("sleep")
            })
            .collect();
        let mut pids = vec![std::process::id()];
        pids.extend(kids.iter().map(|c| c.id()));
        (pids, Kids(kids))
    }

    #[test]
    fn every_process_is_read_once_and_counted_with_its_last_reading_after() {
        let (pids, _kids) = tree(3);
        let me = pids[0];
        let mut fp = Footprint::new(0);
        let mut procs = BTreeMap::new();
        let (rss, _) = fp.poll(&pids, me, &mut procs, 1, true);
        assert_eq!(procs.len(), 4, "each process read at its first tick");
        assert!(rss > 0);
        assert!(
            fp.last.values().all(|l| l.share.is_some()),
            "each process's share read at its first tick (within the burst)"
        );
        // No budget left: only the command's own process is read; the sum stays near.
        fp.proc.add(u64::MAX / 4);
        fp.pss.add(u64::MAX / 4);
        let read_before: Vec<u64> = fp.last.values().map(|l| l.read_ns).collect();
        let (again, _) = fp.poll(&pids, me, &mut procs, 2, false);
        let read_after: Vec<u64> = fp.last.values().map(|l| l.read_ns).collect();
        let reread = read_before
            .iter()
            .zip(&read_after)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(reread, 1, "only the command's process was read again");
        assert_eq!(fp.last[&me].read_ns, 2);
        assert!(again > rss / 2 && again < rss * 2, "{again} vs {rss}");
    }

    #[test]
    fn without_budget_a_fork_child_counts_what_it_gained_and_an_execd_one_its_anon_pages() {
        let (pids, _kids) = tree(2);
        let (me, fork, execd) = (pids[0], pids[1], pids[2]);
        let mut fp = Footprint::new(0);
        fp.pss.add(u64::MAX / 4);
        // It made 8 KiB itself before it was first seen (its channel says): those are its own.
        const MADE: u64 = 8192;
        let forked = Fork::new(MADE, 1, 1, 0);
        fp.set_forks([(fork, forked)].into_iter().collect());
        let mut procs = BTreeMap::new();
        fp.poll(&pids, me, &mut procs, 1, true);
        let share = fp.last[&fork]
            .share
            .expect("the fork child's share is assumed");
        assert!(share.assumed);
        // At most its anonymous pages (a child just started may have fewer than 8 KiB yet).
        let made = MADE.min(share.anon_bytes);
        let own = share.own_of(share.rss_bytes, share.rss_bytes);
        assert!(
            own.abs_diff(made) <= 1,
            "own at first sight: {own} of {made}"
        );
        let grown = share.own_of(share.rss_bytes + 7, share.rss_bytes);
        assert!(
            grown.abs_diff(made + 7) <= 1,
            "own after 7 bytes more: {grown} of {made} + 7"
        );
        assert!(
            fp.last[&execd].share.is_none(),
            "the exec'd one waits for the budget"
        );
        // The command's own CPU time is read with its high-water mark only.
        let before = procs[&me].cpu_s;
        std::hint::black_box((0..20_000_000u64).fold(0u64, |a, b| a ^ b.wrapping_mul(a | 1)));
        fp.poll(&pids, me, &mut procs, 2, false);
        assert_eq!(procs[&me].cpu_s, before);
        fp.poll(&pids, me, &mut procs, 3, true);
        assert!(procs[&me].cpu_s >= before);
        // A fork child that exec'd before its first reading counts as a new image.
        fp.set_forks(Default::default());
        fp.poll(&pids, me, &mut procs, 4, true);
        assert!(fp.last[&fork].share.is_none());
        // With budget again, the never-read come first and every share is read.
        fp.pss = Pace::new(PSS_SHARE, BURST_NS, 0);
        fp.poll(&pids, me, &mut procs, 5, true);
        assert!(fp
            .last
            .values()
            .all(|l| l.share.is_some_and(|s| !s.assumed)));
    }

    #[test]
    fn a_fork_child_seen_after_a_reading_that_followed_its_fork_is_read_at_once() {
        const MS: u64 = 1_000_000;
        let (pids, _kids) = tree(3);
        let (me, early, late) = (pids[0], pids[1], pids[2]);
        let mut fp = Footprint::new(0);
        let mut procs = BTreeMap::new();
        fp.poll(&pids[..2], me, &mut procs, 100 * MS, true);
        assert!(fp
            .last
            .values()
            .all(|l| l.share.is_some_and(|s| !s.assumed)));
        fp.pss.add(u64::MAX / 4);
        // `late` was forked after those readings: its assumed share is consistent with them.
        let fork = |at_ns| Fork::new(0, at_ns, at_ns, 0);
        let forks = [(early, fork(10 * MS)), (late, fork(200 * MS))];
        fp.set_forks(forks[1..].iter().copied().collect());
        fp.poll(&[me, early, late], me, &mut procs, 220 * MS, true);
        assert!(fp.last[&late].share.is_some_and(|s| s.assumed));
        // Had it been forked before them, it is read whatever the budget: those readings
        // counted part of what it shares at their side.
        let (mut fp, mut procs) = (Footprint::new(0), BTreeMap::new());
        fp.poll(&[me, late], me, &mut procs, 100 * MS, true);
        fp.pss.add(u64::MAX / 4);
        fp.set_forks(forks[..1].iter().copied().collect());
        fp.poll(&[me, early, late], me, &mut procs, 120 * MS, true);
        let share = fp.last[&early].share.expect("read");
        assert!(!share.assumed && share.at_ns == 120 * MS);
    }

    #[test]
    fn one_reading_brings_the_assumed_forks_and_those_read_before_a_fork_into_its_tick() {
        const MS: u64 = 1_000_000;
        let (pids, _kids) = tree(2);
        let (me, fork, other) = (pids[0], pids[1], pids[2]);
        let mut fp = Footprint::new(0);
        let mut procs = BTreeMap::new();
        fp.poll(&[me, other], me, &mut procs, 10 * MS, true);
        fp.pss.add(u64::MAX / 4);
        let forked = Fork::new(0, 50 * MS, 50 * MS, 0);
        fp.set_forks([(fork, forked)].into_iter().collect());
        fp.poll(&pids, me, &mut procs, 60 * MS, true);
        assert!(fp.last[&fork].share.is_some_and(|s| s.assumed), "no budget");
        // One reading made whatever the budget: the fork child, then the other process
        // (read before the fork), come with it.
        fp.last.get_mut(&me).unwrap().force = true;
        fp.poll(&pids, me, &mut procs, 80 * MS, true);
        for pid in pids {
            let share = fp.last[&pid].share.expect("read");
            assert!(!share.assumed && share.at_ns == 80 * MS, "{pid}: {share:?}");
        }
    }

    /// Pool(4) on a loaded machine, as recorded: readings of the parent and the first workers
    /// are made while the next workers fork, and the last is first seen 118 ms after its fork.
    /// Putting back the readings made before its fork (an earlier rule) mixed shares of three
    /// and of five sharers and lost a third of the tree's pages.
    #[test]
    fn a_pool_forked_while_its_shares_are_read_keeps_them_in_agreement() {
        const MS: u64 = 1_000_000;
        let (pids, _kids) = tree(4);
        let me = pids[0];
        let forks: Vec<(u32, Fork)> = [(570, 577), (575, 598), (612, 619), (630, 637)]
            .iter()
            .zip(&pids[1..])
            .map(|(&(before, start), &pid)| (pid, Fork::new(0, before * MS, start * MS, me)))
            .collect();
        let mut fp = Footprint::new(0);
        let mut procs = BTreeMap::new();
        fp.poll(&pids[..1], me, &mut procs, 500 * MS, true);
        for (now, seen) in [(583, 2), (643, 4), (755, 5), (777, 5)] {
            fp.set_forks(forks[..seen - 1].iter().copied().collect());
            fp.poll(&pids[..seen], me, &mut procs, now * MS, true);
            assert!(fp.shares_agree(), "at {now} ms: {:?}", fp.last);
            // The budget is spent from here on.
            fp.pss.add(u64::MAX / 4);
        }
        let late = fp.last[&pids[4]].share.expect("the last worker's share");
        assert!(!late.assumed, "read at once: readings followed its fork");
    }

    /// Forks seen late or early, budgets spent or not, in any order: after every tick each
    /// fork child's share agrees with every other reading.
    #[test]
    fn shares_agree_after_every_tick_whatever_the_order_of_forks_and_readings() {
        const MS: u64 = 1_000_000;
        let (pids, _kids) = tree(5);
        let me = pids[0];
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..40 {
            let mut fp = Footprint::new(0);
            let mut procs = BTreeMap::new();
            // Each child: forked (before, channel made) and first seen at a random tick.
            let mut forks = BTreeMap::new();
            let mut seen_at = BTreeMap::new();
            let mut at = 10 * MS;
            for &pid in &pids[1..] {
                at += next(60) * MS;
                let start = at + next(40) * MS;
                forks.insert(pid, Fork::new(0, at, start, me));
                seen_at.insert(pid, start + next(150) * MS);
            }
            for tick in 1..40u64 {
                let now = tick * 20 * MS;
                let live: Vec<u32> = (pids.iter().copied())
                    .filter(|p| *p == me || seen_at[p] <= now)
                    .collect();
                let known = forks.iter().filter(|(p, _)| live.contains(p));
                fp.set_forks(known.map(|(&p, &f)| (p, f)).collect());
                if next(3) == 0 {
                    fp.pss = Pace::new(PSS_SHARE, BURST_NS, now);
                } else {
                    fp.pss.add(u64::MAX / 4);
                }
                fp.poll(&live, me, &mut procs, now, tick % 5 == 0);
                assert!(fp.shares_agree(), "round {round}, {now} ns: {:?}", fp.last);
            }
        }
    }

    #[test]
    fn pss_readings_stay_within_their_share_of_a_cpu() {
        let (pids, _kids) = tree(6);
        let me = pids[0];
        let mut fp = Footprint::new(0);
        let mut procs = BTreeMap::new();
        // 200 ticks of 20 ms: 4 s of collection.
        for i in 1..=200u64 {
            fp.poll(&pids, me, &mut procs, i * 20_000_000, i % 5 == 0);
        }
        let earned = (4e9 * PSS_SHARE) as u64 + BURST_NS;
        // One reading may pass the budget: it is measured after it is made.
        assert!(
            fp.pss.spent_ns() <= earned + 5_000_000,
            "{} ns spent on PSS, {earned} earned",
            fp.pss.spent_ns()
        );
        assert!(fp.last.values().all(|l| l.share.is_some()));
    }
}
