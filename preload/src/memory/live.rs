//! The sampled allocations still alive: a lock-free set of addresses ([`Table`]), with a small
//! counting filter in front so that the common case — freeing an address that was never
//! sampled — costs one read of a 64 KiB table that stays in cache.
//! Runs inside allocation hooks: no allocation, no locks.

use core::sync::atomic::{AtomicU8, Ordering};

use crate::table::{self, Table};

const SLOTS: usize = 1 << 17;
const PROBES: usize = 32;
const FILTER: usize = 1 << 16;

static KEYS: Table<(), SLOTS, PROBES> = Table::new();
static COUNTS: [AtomicU8; FILTER] = [const { AtomicU8::new(0) }; FILTER];

#[inline]
fn hash(addr: usize) -> usize {
    (addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20
}

/// The filter's counter for `hash` (always there: the mask keeps it in range).
#[inline(always)]
fn count(hash: usize) -> Option<&'static AtomicU8> {
    COUNTS.get(hash & (FILTER - 1))
}

/// Remember `addr` as a sampled live allocation. `false` if the table is too full.
pub fn insert(addr: usize) -> bool {
    if !table::storable(addr) {
        return false;
    }
    let h = hash(addr);
    let Some(count) = count(h) else { return false };
    // Count first, so that a free racing with this insert never skips the table. Saturates at
    // 255: a saturated counter only costs later frees a table lookup.
    let counted = count
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |c| c.checked_add(1))
        .is_ok();
    if KEYS.insert(h, addr, ()) {
        return true;
    }
    if counted {
        uncount(count);
    }
    false
}

fn uncount(count: &AtomicU8) {
    let _ = count.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |c| {
        (c != u8::MAX).then(|| c.saturating_sub(1))
    });
}

/// Whether `addr` may be a sampled live allocation (the filter alone: `false` is sure).
#[inline(always)]
pub fn may_hold(addr: usize) -> bool {
    count(hash(addr)).is_some_and(|c| c.load(Ordering::Relaxed) != 0)
}

/// Forget `addr` if it was a sampled live allocation; returns whether it was.
#[inline(always)]
pub fn remove(addr: usize) -> bool {
    let h = hash(addr);
    let Some(count) = count(h) else { return false };
    if count.load(Ordering::Relaxed) == 0 {
        return false;
    }
    remove_slow(addr, h, count)
}

#[inline(never)]
fn remove_slow(addr: usize, h: usize, count: &AtomicU8) -> bool {
    let removed = KEYS.remove(h, addr).is_some();
    if removed {
        uncount(count);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_addresses_are_found_once() {
        let base = 0x7f00_0000_0000usize;
        for i in 0..1000 {
            assert!(insert(base + i * 64));
        }
        assert!(!remove(base + 8), "never inserted");
        for i in 0..1000 {
            assert!(remove(base + i * 64), "{i}");
            assert!(!remove(base + i * 64), "removed twice");
        }
    }
}
