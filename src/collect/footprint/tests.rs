//! The footprint's readings and their budgets, on real processes (this test's children).

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
    for &kid in &pids[1..] {
        settled(kid);
    }
    (pids, Kids(kids))
}

/// Wait (2 s at most) until `pid` has started up: asleep, its resident memory unchanged over
/// 20 ms (on a loaded machine `sleep` can still be loading its libraries when its spawn
/// returns, and a reading made then differs from one made a moment later).
fn settled(pid: u32) {
    let look = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let asleep = stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('S'));
        let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
        (asleep, statm)
    };
    for _ in 0..100 {
        let (asleep, before) = look();
        std::thread::sleep(std::time::Duration::from_millis(20));
        if asleep && look() == (true, before) {
            return;
        }
    }
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

/// This test's process and `other` read at 10 ms, then `fork`, forked at 50 ms, first seen
/// at 60 ms with the budget spent: its share assumed. (The footprint, its process
/// summaries, the pids `[me, fork, other]` and the children to keep.)
fn a_fork_child_assumed() -> (Footprint, BTreeMap<u32, ProcSummary>, Vec<u32>, Kids) {
    const MS: u64 = 1_000_000;
    let (pids, kids) = tree(2);
    let (me, fork, other) = (pids[0], pids[1], pids[2]);
    let mut fp = Footprint::new(0);
    let mut procs = BTreeMap::new();
    fp.poll(&[me, other], me, &mut procs, 10 * MS, true);
    assert!(fp.last.values().all(|l| l.share_cost_ns > 0), "costs kept");
    fp.set_forks([(fork, Fork::new(0, 50 * MS, 50 * MS, me))].into());
    fp.pss.add(u64::MAX / 4);
    fp.poll(&pids, me, &mut procs, 60 * MS, true);
    assert!(fp.last[&fork].share.is_some_and(|s| s.assumed), "no budget");
    (fp, procs, pids, kids)
}

#[test]
fn one_reading_brings_the_assumed_forks_and_those_read_before_a_fork_into_its_tick() {
    const MS: u64 = 1_000_000;
    let (mut fp, mut procs, pids, _kids) = a_fork_child_assumed();
    let me = pids[0];
    // One reading made whatever the budget: the fork child, then the other process
    // (read before the fork), come with it.
    fp.last.get_mut(&me).unwrap().force = true;
    fp.poll(&pids, me, &mut procs, 80 * MS, true);
    for pid in pids {
        let share = fp.last[&pid].share.expect("read");
        assert!(!share.assumed && share.at_ns == 80 * MS, "{pid}: {share:?}");
    }
}

/// Pool(4) on a loaded machine, as recorded: workers first seen one by one, the last 118
/// ms after its fork. Readings made in the burst (an earlier rule) then put back to those
/// before each fork mixed shares of three and of five sharers and lost a third of the
/// tree's pages.
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
    // Nothing was read in the burst (each worker first seen within 500 ms of the last):
    // no reading fell between a fork and its child's first sight.
    assert!(forks
        .iter()
        .all(|(pid, _)| fp.last[pid].share.is_some_and(|s| s.assumed)));
    // After it, with the budget, the whole tree in one tick.
    fp.pss = Pace::new(PSS_SHARE, BURST_NS, 0);
    fp.poll(&pids, me, &mut procs, 2_000 * MS, true);
    assert!(fp
        .last
        .values()
        .all(|l| l.share.is_some_and(|s| !s.assumed)));
    assert!(fp.shares_agree());
}

/// A reading while a fork child is assumed brings the whole tree along: it waits until
/// the budget holds every process's reading at what each cost last, then all are read in
/// one tick. (A DataLoader's parent, due every 100 ms, brought its 8 new workers along at
/// once each epoch, about 100 ms of the collector's CPU.)
#[test]
fn while_a_fork_child_is_assumed_shares_wait_until_the_budget_holds_the_tree() {
    const MS: u64 = 1_000_000;
    let (mut fp, mut procs, pids, _kids) = a_fork_child_assumed();
    let (me, fork, other) = (pids[0], pids[1], pids[2]);
    // The budget holds one reading (the command's process is due), not the tree's three.
    for pid in [me, other] {
        fp.last.get_mut(&pid).unwrap().share_cost_ns = 6 * MS;
    }
    fp.pss = Pace::new(PSS_SHARE, BURST_NS, 0);
    fp.poll(&pids, me, &mut procs, 200 * MS, true);
    assert!(
        fp.pss.allowed(200 * MS),
        "one reading was within the budget"
    );
    assert_eq!(
        fp.last[&me].share.map(|s| s.at_ns),
        Some(10 * MS),
        "not read"
    );
    assert!(fp.last[&fork].share.is_some_and(|s| s.assumed));
    // Once it holds them all, all are read in one tick, but not within 500 ms of a fork
    // child's first sight (the rest of a burst of forks).
    for pid in [me, other] {
        fp.last.get_mut(&pid).unwrap().share_cost_ns = MS;
    }
    fp.poll(&pids, me, &mut procs, 220 * MS, true);
    assert!(
        fp.last[&fork].share.is_some_and(|s| s.assumed),
        "in the quiet"
    );
    let after = 60 * MS + shares::FORK_QUIET_NS;
    fp.poll(&pids, me, &mut procs, after, true);
    for pid in pids {
        let share = fp.last[&pid].share.expect("read");
        assert!(!share.assumed && share.at_ns == after, "{pid}: {share:?}");
    }
    assert!(fp.shares_agree());
}

/// A share read in a tick goes with what the others hold then: those not read in it
/// (the budget of other `/proc` readings spent) are read before it.
#[test]
fn a_share_is_read_with_the_others_resident_memory_of_the_same_tick() {
    const MS: u64 = 1_000_000;
    let (pids, _kids) = tree(1);
    let (me, kid) = (pids[0], pids[1]);
    let mut fp = Footprint::new(0);
    let mut procs = BTreeMap::new();
    fp.poll(&pids, me, &mut procs, 10 * MS, true);
    // Its last reading says 1 GiB (it has since given it back), and the budget of other
    // readings is spent: it counts with that reading while no share is read...
    fp.last.get_mut(&kid).unwrap().rss_bytes = 1 << 30;
    fp.proc.add(u64::MAX / 4);
    fp.pss.add(u64::MAX / 4);
    let (stale, _) = fp.poll(&pids, me, &mut procs, 20 * MS, true);
    assert_eq!(fp.last[&kid].read_ns, 10 * MS);
    // ...and is read again with the command's process's share.
    fp.last.get_mut(&me).unwrap().force = true;
    let (sum, _) = fp.poll(&pids, me, &mut procs, 40 * MS, true);
    assert_eq!(fp.last[&kid].read_ns, 40 * MS);
    let rss = procfs::read(kid, false, false).expect("alive").rss_bytes;
    assert!(fp.last[&kid].rss_bytes.abs_diff(rss) < 1 << 20);
    assert!(sum < stale / 2, "{sum} after {stale}");
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
