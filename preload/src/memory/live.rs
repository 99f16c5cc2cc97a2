//! The sampled allocations still alive: a lock-free open-addressing set of addresses, with a
//! small counting filter in front so that the common case — freeing an address that was never
//! sampled — costs one read of a 64 KiB table that stays in cache.
//! Runs inside allocation hooks: no allocation, no locks.

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

const SLOTS: usize = 1 << 17;
const PROBES: usize = 32;
const FILTER: usize = 1 << 16;
const EMPTY: usize = 0;
const GONE: usize = 1;

static KEYS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(EMPTY) }; SLOTS];
static COUNTS: [AtomicU8; FILTER] = [const { AtomicU8::new(0) }; FILTER];

#[inline]
fn hash(addr: usize) -> usize {
    (addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20
}

/// Remember `addr` as a sampled live allocation. `false` if the table is too full.
pub fn insert(addr: usize) -> bool {
    if addr <= GONE {
        return false;
    }
    let h = hash(addr);
    let count = &COUNTS[h & (FILTER - 1)];
    // Count first, so that a free racing with this insert never skips the table. Saturates at
    // 255: a saturated counter only costs later frees a table lookup.
    let counted = count
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |c| c.checked_add(1))
        .is_ok();
    for probe in 0..PROBES {
        let slot = &KEYS[(h + probe) & (SLOTS - 1)];
        let key = slot.load(Ordering::Relaxed);
        if (key == EMPTY || key == GONE)
            && slot
                .compare_exchange(key, addr, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return true;
        }
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
    COUNTS[hash(addr) & (FILTER - 1)].load(Ordering::Relaxed) != 0
}

/// Forget `addr` if it was a sampled live allocation; returns whether it was.
#[inline(always)]
pub fn remove(addr: usize) -> bool {
    let h = hash(addr);
    let count = &COUNTS[h & (FILTER - 1)];
    if count.load(Ordering::Relaxed) == 0 {
        return false;
    }
    remove_slow(addr, h, count)
}

#[inline(never)]
fn remove_slow(addr: usize, h: usize, count: &AtomicU8) -> bool {
    for probe in 0..PROBES {
        let slot = &KEYS[(h + probe) & (SLOTS - 1)];
        let key = slot.load(Ordering::Acquire);
        if key == EMPTY {
            return false;
        }
        if key == addr
            && slot
                .compare_exchange(addr, GONE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            uncount(count);
            return true;
        }
    }
    false
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
