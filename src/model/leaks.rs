//! Leak evidence and footprints from a place's sampled blocks (see `docs/design/memory-sampling.md`).
//!
//! A line likely leaks when (1) what it allocates is rarely freed — by Laplace's rule of
//! succession, the chance that its next allocation is never freed, `(a - f + 1) / (a + 2)`
//! for `a` sampled allocations of which `f` were freed, is at least [`MIN_LIKELIHOOD`] — and
//! (2) its live bytes keep growing: they rise from each quarter of the time since its first
//! allocation to the next. A line that allocates once and keeps it fails (2); a line whose
//! temporaries are freed each iteration fails (1). Frees during interpreter shutdown are not
//! frees for this purpose: the preload library does not report them. Pure.

use super::profile::Leak;
use crate::recording::AllocGroup;

/// Likelihood above which a growing line is reported.
pub const MIN_LIKELIHOOD: f64 = 0.9;
/// Fewer sampled allocations than this are not evidence.
const MIN_SAMPLES: u64 = 4;

/// The sampled blocks of one place, as changes of its live bytes over time: a block adds its
/// weight when allocated and takes it away when freed, so the place's live bytes at a moment
/// are the sum of the changes up to it. Blocks the collector folded ([`AllocGroup`]) come as
/// their changes per window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lifetimes {
    /// (ns from launch, bytes), in no particular order.
    changes: Vec<(u64, i64)>,
    /// Sampled allocations.
    allocated: u64,
    /// Of which freed.
    freed: u64,
    /// Time of the first allocation.
    first_ns: Option<u64>,
    /// Time of the last allocation.
    last_ns: u64,
}

impl Lifetimes {
    /// Add a block allocated at `t_ns`, freed at `freed_ns` if it was, standing for `weight`
    /// bytes.
    pub fn block(&mut self, t_ns: u64, freed_ns: Option<u64>, weight: u64) {
        let w = weight.min(i64::MAX as u64) as i64;
        self.changes.push((t_ns, w));
        if let Some(f) = freed_ns {
            self.changes.push((f, -w));
            self.freed += 1;
        }
        self.allocated += 1;
        self.first_ns = Some(self.first_ns.map_or(t_ns, |f| f.min(t_ns)));
        self.last_ns = self.last_ns.max(t_ns);
    }

    /// Add a group of folded (freed) blocks.
    pub fn group(&mut self, g: &AllocGroup) {
        self.changes.extend_from_slice(&g.changes);
        self.allocated += g.count;
        self.freed += g.count;
        if g.count > 0 {
            self.first_ns = Some(self.first_ns.map_or(g.first_ns, |f| f.min(g.first_ns)));
            self.last_ns = self.last_ns.max(g.last_ns);
        }
    }

    /// Add everything of `other`.
    pub fn merge(&mut self, other: Lifetimes) {
        self.changes.extend(other.changes);
        self.allocated += other.allocated;
        self.freed += other.freed;
        if let Some(t) = other.first_ns {
            self.first_ns = Some(self.first_ns.map_or(t, |f| f.min(t)));
        }
        self.last_ns = self.last_ns.max(other.last_ns);
    }

    /// Live bytes after each moment a change happened, in time order.
    fn curve(&self) -> Vec<(u64, i64)> {
        let mut changes = self.changes.clone();
        changes.sort_unstable_by_key(|c| c.0);
        let mut live = 0i64;
        let mut out: Vec<(u64, i64)> = Vec::with_capacity(changes.len());
        for (t, change) in changes {
            live = live.saturating_add(change);
            match out.last_mut() {
                Some(last) if last.0 == t => last.1 = live,
                _ => out.push((t, live)),
            }
        }
        out
    }
}

/// Live bytes at `t_ns` on a curve from [`Lifetimes::curve`].
fn live_at(curve: &[(u64, i64)], t_ns: u64) -> u64 {
    let after = curve.partition_point(|c| c.0 <= t_ns);
    after.checked_sub(1).map_or(0, |i| curve[i].1.max(0) as u64)
}

/// Leak evidence for one place, if it likely leaks.
pub fn evidence(blocks: &Lifetimes) -> Option<Leak> {
    if blocks.allocated < MIN_SAMPLES {
        return None;
    }
    let allocated = blocks.allocated as f64;
    let freed = blocks.freed as f64;
    let likelihood = (allocated - freed + 1.0) / (allocated + 2.0);
    if likelihood < MIN_LIKELIHOOD {
        return None;
    }
    let start = blocks.first_ns?;
    let last = blocks.last_ns;
    if last <= start {
        return None; // everything at one moment: kept, not growing
    }
    let curve = blocks.curve();
    let quarters: Vec<u64> = (1..=4).map(|q| start + (last - start) * q / 4).collect();
    let live: Vec<u64> = quarters.iter().map(|&t| live_at(&curve, t)).collect();
    if !live.windows(2).all(|w| w[1] > w[0]) {
        return None;
    }
    let seconds = (quarters[3] - quarters[0]) as f64 / 1e9;
    let bytes_per_s = if seconds > 0.0 {
        (live[3] - live[0]) as f64 / seconds
    } else {
        0.0
    };
    Some(Leak {
        likelihood,
        bytes_per_s,
    })
}

/// Live bytes at `points` evenly spaced moments in `[0, end_ns]`.
pub fn footprint(blocks: &Lifetimes, end_ns: u64, points: usize) -> Vec<u64> {
    if blocks.allocated == 0 || points == 0 {
        return Vec::new();
    }
    let curve = blocks.curve();
    (1..=points)
        .map(|i| live_at(&curve, end_ns * i as u64 / points as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(list: impl IntoIterator<Item = (u64, Option<u64>)>) -> Lifetimes {
        let mut out = Lifetimes::default();
        for (t, freed) in list {
            out.block(t * 1_000_000, freed.map(|f| f * 1_000_000), 1 << 20);
        }
        out
    }

    #[test]
    fn growing_unfreed_allocations_are_a_leak() {
        let blocks = blocks((0..100).map(|i| (i * 10, None)));
        let leak = evidence(&blocks).expect("a leak");
        assert!(leak.likelihood > 0.98);
        assert!((leak.bytes_per_s - 100.0 * (1 << 20) as f64).abs() < 10.0 * (1 << 20) as f64);
    }

    #[test]
    fn temporaries_and_kept_once_data_are_not() {
        let temps = blocks((0..100).map(|i| (i * 10, Some(i * 10 + 5))));
        assert_eq!(evidence(&temps), None);
        let kept = blocks((0..100).map(|_| (50, None)));
        assert_eq!(evidence(&kept), None);
        let few = blocks((0..3).map(|i| (i, None)));
        assert_eq!(evidence(&few), None);
    }

    #[test]
    fn footprint_follows_live_bytes() {
        let blocks = blocks([(0, Some(500)), (600, None)]);
        let f = footprint(&blocks, 1_000_000_000, 10);
        assert_eq!(f.len(), 10);
        assert_eq!(f[0], 1 << 20);
        assert_eq!(
            f[4], 0,
            "at 500 ms the first block is freed and the second not yet made"
        );
        assert_eq!(f[9], 1 << 20);
    }
}
