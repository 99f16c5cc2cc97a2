//! pymalloc arenas counted in the heap, by start address, so that freeing an arena subtracts
//! exactly what was added (arenas made before the wrapper was installed were never added). A
//! lock-free map of start → length ([`Table`]). Runs inside hooks: no allocation, no locks.

use core::sync::atomic::AtomicUsize;

use crate::table::Table;

const SLOTS: usize = 1 << 14;
const PROBES: usize = 64;

static ARENAS: Table<AtomicUsize, SLOTS, PROBES> = Table::new();

#[inline]
fn hash(addr: usize) -> usize {
    (addr >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50
}

/// Remember a counted mapping. `false` if the table is full (the caller then does not count it).
pub fn insert(start: usize, len: usize) -> bool {
    ARENAS.insert(hash(start), start, len)
}

/// Forget the counted mapping that starts at `start`; returns its length (0 if not counted).
pub fn remove(start: usize) -> usize {
    ARENAS.remove(hash(start), start).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_are_remembered_by_start() {
        let base = 0x7f12_3400_0000usize;
        assert!(insert(base, 1 << 20));
        assert!(insert(base + (1 << 20), 4096));
        assert_eq!(remove(base + 4096), 0, "not a start");
        assert_eq!(remove(base), 1 << 20);
        assert_eq!(remove(base), 0, "removed once");
        assert_eq!(remove(base + (1 << 20)), 4096);
    }
}
