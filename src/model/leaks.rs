//! Leak evidence and footprints from a place's sampled blocks (see `docs/design/memory-sampling.md`).
//!
//! A line likely leaks when (1) what it allocates is rarely freed — by Laplace's rule of
//! succession, the chance that its next allocation is never freed, `(a - f + 1) / (a + 2)`
//! for `a` sampled allocations of which `f` were freed, is at least [`MIN_LIKELIHOOD`] — and
//! (2) its live bytes keep growing: they rise from each quarter of the time since its first
//! allocation to the next. A line that allocates once and keeps it fails (2); a line whose
//! temporaries are freed each iteration fails (1). Frees during interpreter shutdown are not
//! frees for this purpose: the preload library does not report them. Pure.

use super::places::Block;
use super::profile::Leak;

/// Likelihood above which a growing line is reported.
pub const MIN_LIKELIHOOD: f64 = 0.9;
/// Fewer sampled allocations than this are not evidence.
const MIN_SAMPLES: usize = 4;

/// Live bytes of `blocks` at `t_ns`.
fn live_at(blocks: &[Block], t_ns: u64) -> u64 {
    blocks
        .iter()
        .filter(|b| b.t_ns <= t_ns && b.freed_ns.is_none_or(|f| f > t_ns))
        .map(|b| b.weight)
        .sum()
}

/// Leak evidence for one place, if it likely leaks.
pub fn evidence(blocks: &[Block], end_ns: u64) -> Option<Leak> {
    if blocks.len() < MIN_SAMPLES {
        return None;
    }
    let allocated = blocks.len() as f64;
    let freed = blocks
        .iter()
        .filter(|b| b.freed_ns.is_some_and(|f| f <= end_ns))
        .count() as f64;
    let likelihood = (allocated - freed + 1.0) / (allocated + 2.0);
    if likelihood < MIN_LIKELIHOOD {
        return None;
    }
    let start = blocks.iter().map(|b| b.t_ns).min()?;
    let last = blocks.iter().map(|b| b.t_ns).max()?;
    if last <= start {
        return None; // everything at one moment: kept, not growing
    }
    let quarters: Vec<u64> = (1..=4).map(|q| start + (last - start) * q / 4).collect();
    let live: Vec<u64> = quarters.iter().map(|&t| live_at(blocks, t)).collect();
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
pub fn footprint(blocks: &[Block], end_ns: u64, points: usize) -> Vec<u64> {
    if blocks.is_empty() || points == 0 {
        return Vec::new();
    }
    (1..=points)
        .map(|i| live_at(blocks, end_ns * i as u64 / points as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(t: u64, freed: Option<u64>) -> Block {
        Block {
            t_ns: t * 1_000_000,
            freed_ns: freed.map(|f| f * 1_000_000),
            weight: 1 << 20,
        }
    }

    #[test]
    fn growing_unfreed_allocations_are_a_leak() {
        let blocks: Vec<Block> = (0..100).map(|i| block(i * 10, None)).collect();
        let leak = evidence(&blocks, 1_000_000_000).expect("a leak");
        assert!(leak.likelihood > 0.98);
        assert!((leak.bytes_per_s - 100.0 * (1 << 20) as f64).abs() < 10.0 * (1 << 20) as f64);
    }

    #[test]
    fn temporaries_and_kept_once_data_are_not() {
        let temps: Vec<Block> = (0..100).map(|i| block(i * 10, Some(i * 10 + 5))).collect();
        assert_eq!(evidence(&temps, 1_000_000_000), None);
        let kept: Vec<Block> = (0..100).map(|_| block(50, None)).collect();
        assert_eq!(evidence(&kept, 1_000_000_000), None);
        let few: Vec<Block> = (0..3).map(|i| block(i, None)).collect();
        assert_eq!(evidence(&few, 1_000_000_000), None);
    }

    #[test]
    fn footprint_follows_live_bytes() {
        let blocks = vec![block(0, Some(500)), block(600, None)];
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
