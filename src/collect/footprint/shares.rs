//! Shares of own pages (PSS / RSS) of the tree's processes, read within their budget and kept
//! in agreement with each other.
//!
//! PSS splits a page shared by `n` processes into `n` parts, so summing the processes' PSS
//! counts it once only when the readings agree on who shares it. A fork child not read yet is
//! assumed to share every page it had when first seen but what it made itself since the fork;
//! that agrees with readings of the others made before its fork, not with those made after
//! (they gave it a part of what they share, which its assumed share does not count). So:
//! - a fork child seen after a reading that may have followed its fork (made after the
//!   parent's clock just before the fork) is read at once ([`Footprint::agree_with_fork`]);
//! - a reading made in a tick brings every fork child still assumed into it, and a fork
//!   child read for real every process read before it surely existed (its channel), whatever
//!   the budget (it is spent all the same, so the next readings wait until it is earned).
//!
//! Bringing the others along costs a reading of every process of the tree at once (a
//! DataLoader's 8 workers and its parent: about 100 ms, each time the workers are made
//! again). So while a fork child is assumed, or a reading predates the fork of a child read
//! since, a reading is made only when the budget holds the whole tree's readings at what
//! they cost last ([`Footprint::tree_cost_ns`]), and not within [`FORK_QUIET_NS`] of a fork
//! child's first sight: forks come in bursts (a pool, a DataLoader), and a reading made
//! between a fork and its child's first sight makes that child be read at once, and with it
//! the tree again (a DataLoader's second epoch read its tree four times, 24 readings and
//! 190 ms, as its 8 workers came one by one); until then each counts as before.
//!
//! After every tick, then, each fork child's share agrees with every other reading: one still
//! assumed with readings all made before its fork, one read with readings all made after it
//! ([`Footprint::shares_agree`]). Putting an older reading back instead (as an earlier version
//! did) mixed readings of different sets of sharers and lost a third of a fork tree.

use super::{Footprint, PSS_EVERY_NS};
use crate::collect::procfs;

/// A process's share of own pages at a PSS reading.
#[derive(Clone, Copy, Debug)]
pub(super) struct Share {
    /// PSS / RSS then.
    pub(super) own: f64,
    /// When (ns from launch).
    pub(super) at_ns: u64,
    /// Its RSS and anonymous part then.
    pub(super) rss_bytes: u64,
    pub(super) anon_bytes: u64,
    /// Not read but assumed: a fork child before its first PSS reading shares every page it
    /// had when first seen (its parent's) but what it made itself, so only that and what it
    /// gains after are its own.
    pub(super) assumed: bool,
}

impl Share {
    /// What of `now` (bytes resident now, `then` at the reading) counts as the process's own.
    /// Pages it gained since are its own (new pages are private: a fork child that allocates
    /// grows by its own pages, while the pages it shares stay as they were), so the part it
    /// shared then is taken away; pages it lost are taken from both parts alike.
    pub(super) fn own_of(&self, now: u64, then: u64) -> u64 {
        let shared_then = then as f64 * (1.0 - self.own);
        let grown = (now as f64 - shared_then).max(0.0);
        let scaled = now as f64 * self.own;
        grown.max(scaled).min(now as f64) as u64
    }
}

/// A fork image of the tree, as its channel says.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fork {
    /// Bytes it made itself since the fork (heap beyond what it inherited, mappings it made).
    pub made: u64,
    /// Just before it was forked (ns from launch; its parent's clock): readings of the others
    /// made earlier preceded the fork.
    pub before_ns: u64,
    /// When its channel was made (ns from launch): readings made since followed the fork.
    pub start_ns: u64,
    /// Its parent's pid.
    pub parent: u32,
}

/// How long after a fork child's first sight readings that bring the tree along wait: the
/// rest of a burst of forks is seen by then.
pub(super) const FORK_QUIET_NS: u64 = 500_000_000;

/// What a process never read is expected to cost at least, with no other reading to go by.
const NEVER_READ_COST_NS: u64 = 100_000;

/// Where a channel does not say when its fork began: this long before the channel was made
/// (the channel is made just after the fork, unless the machine is loaded).
const FORK_SLACK_NS: u64 = 50_000_000;

impl Fork {
    /// A fork image whose channel says `fork_ns` (0: unknown) and `start_ns`.
    pub fn new(made: u64, fork_ns: u64, start_ns: u64, parent: u32) -> Fork {
        let before_ns = match fork_ns {
            0 => start_ns.saturating_sub(FORK_SLACK_NS),
            known => known.min(start_ns),
        };
        Fork {
            made,
            before_ns,
            start_ns,
            parent,
        }
    }
}

impl Footprint {
    /// `pid`, a fork child first seen with an assumed share: if a reading of another process
    /// may have been made after its fork, it is read at once (and brings the others along).
    pub(super) fn agree_with_fork(&mut self, pid: u32) {
        let Some(fork) = self.forks.get(&pid).copied() else {
            return;
        };
        let after_fork = (self.last.iter())
            .filter(|(&other, _)| other != pid)
            .filter_map(|(_, last)| last.share)
            .any(|s| !s.assumed && s.at_ns >= fork.before_ns);
        if let Some(last) = self.last.get_mut(&pid) {
            last.force |= after_fork;
        }
    }

    /// What reading every process's share is expected to cost: each at what its last reading
    /// cost, one never read at the costliest reading so far.
    fn tree_cost_ns(&self) -> u64 {
        let costliest = (self.last.values().map(|l| l.share_cost_ns).max()).unwrap_or(0);
        let each = |l: &super::Last| match l.share_cost_ns {
            0 => costliest.max(NEVER_READ_COST_NS),
            cost => cost,
        };
        self.last.values().map(each).sum()
    }

    /// Whether every fork child's share agrees with every other reading: one still assumed
    /// with readings all made before its fork, one read with readings all made after it.
    #[cfg(test)]
    pub(super) fn shares_agree(&self) -> bool {
        let read = |pid: u32| (self.last.iter()).filter(move |(&other, _)| other != pid);
        self.forks.iter().all(|(&pid, fork)| {
            let Some(own) = self.last.get(&pid).and_then(|l| l.share) else {
                return true;
            };
            read(pid)
                .filter_map(|(_, l)| l.share.filter(|s| !s.assumed))
                .all(|s| match own.assumed {
                    true => s.at_ns < fork.before_ns,
                    false => s.at_ns >= fork.start_ns,
                })
        })
    }

    /// PSS readings due, within their budget: never read first (the command's process ahead),
    /// then those read before the fork of a child read since, then the oldest. A fork child
    /// read for real brings the readings it must agree with into the same tick.
    pub(super) fn read_shares(&mut self, now: u64, child: u32) {
        let read_fork = |fp: &Self, pid: &u32| {
            let read = fp.last.get(pid);
            read.is_some_and(|l| l.share.is_some_and(|s| !s.assumed))
        };
        // The newest fork of a child whose share was read: a process read before it counts
        // pages it shares with that child at too large a part, so it is due next.
        let newest_fork = (self.forks.iter())
            .filter(|(pid, _)| read_fork(self, pid))
            .map(|(_, f)| f.start_ns)
            .max()
            .unwrap_or(0);
        // (order, the command's process last, pid), and whether it is due within the budget;
        // those not due are read only with a fork child read in the tick.
        let mut due: Vec<((u64, bool, u32), bool)> = self
            .last
            .iter()
            .map(|(&pid, l)| match l.share {
                None => ((0, pid != child, pid), true),
                Some(share) if share.assumed => ((0, pid != child, pid), true),
                Some(share) if share.at_ns < newest_fork => ((1, pid != child, pid), true),
                Some(share) => {
                    let due = now.saturating_sub(share.at_ns) >= PSS_EVERY_NS;
                    ((share.at_ns + 1, pid != child, pid), due)
                }
            })
            .collect();
        due.sort_unstable();
        // A reading now would bring the whole tree along (a fork child assumed, or a reading
        // older than a read fork child): only when the budget holds it all.
        let brings_all = self.last.values().any(|l| {
            l.share
                .is_some_and(|s| s.assumed || (s.at_ns < newest_fork && newest_fork > 0))
        });
        let tree_ok = brings_all
            && now >= self.fork_seen_ns.saturating_add(FORK_QUIET_NS)
            && self.pss.allowed_for(now, self.tree_cost_ns());
        // Whether a share was read in this tick, and the newest fork among the children read
        // in it: every fork child still assumed, and every process read before that child
        // surely existed, are read in it too (a second pass for those that came first in the
        // order).
        let (mut any_read, mut fork_read) = (false, None::<u64>);
        let due = due
            .iter()
            .chain(due.iter())
            .map(|&((_, _, pid), due)| (pid, due));
        for (pid, due) in due {
            // Until its first, an exec'd process counts its anonymous pages as its own, which
            // they are (its file pages are libraries, most likely shared): 40 short children
            // importing torch each paid 5-17 ms for a first reading that changed nothing; a
            // fork child counts what it made and gained (the first readings of a
            // DataLoader's 8 workers were 40% of the collector's CPU).
            let Some(last) = self.last.get(&pid) else {
                continue;
            };
            let share = last.share;
            if share.is_some_and(|s| !s.assumed && s.at_ns == now) {
                continue; // read in the first pass
            }
            let with_fork = share.is_some_and(|s| {
                (any_read && s.assumed) || fork_read.is_some_and(|start_ns| s.at_ns < start_ns)
            });
            let budget = if brings_all {
                tree_ok
            } else {
                self.pss.allowed(now)
            };
            let allowed = last.force || with_fork || (due && budget);
            if !allowed {
                continue;
            }
            if !any_read {
                self.refresh_others(now);
                if !self.last.contains_key(&pid) {
                    continue; // it has ended
                }
            }
            let spent = self.pss.spent_ns();
            let own = self.pss.spend(|| procfs::own_share(pid));
            let cost = self.pss.spent_ns().saturating_sub(spent).max(1);
            let (Some(own), Some(last)) = (own, self.last.get_mut(&pid)) else {
                continue;
            };
            last.force = false;
            last.share_cost_ns = cost;
            last.share = Some(Share {
                own,
                at_ns: now,
                rss_bytes: last.rss_bytes,
                anon_bytes: last.anon_bytes,
                assumed: false,
            });
            any_read = true;
            if let Some(fork) = self.forks.get(&pid) {
                fork_read = Some(fork_read.unwrap_or(0).max(fork.start_ns));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_gained_since_a_reading_are_own_and_pages_lost_leave_both_parts() {
        const MIB: u64 = 1 << 20;
        // A fork child that shared 240 of its 300 MiB at its reading (PSS 60 MiB + what it
        // shares split among five) then allocated 50 MiB: its own is 110 MiB.
        let share = Share {
            own: 0.2,
            at_ns: 0,
            rss_bytes: 300 * MIB,
            anon_bytes: 300 * MIB,
            assumed: false,
        };
        assert_eq!(share.own_of(350 * MIB, 300 * MIB), 110 * MIB);
        assert_eq!(share.own_of(300 * MIB, 300 * MIB), 60 * MIB);
        // Shrunk to 150 MiB: at least its share of what is left, never more than it has.
        assert_eq!(share.own_of(150 * MIB, 300 * MIB), 30 * MIB);
        assert_eq!(share.own_of(0, 300 * MIB), 0);
    }
}
