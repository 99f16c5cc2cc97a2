//! The one rule for peak marks: a counter is marked again when it has risen 1% and at least
//! 1 MiB above its last mark, so a growing heap sends few marks however large it grows. Used by
//! the heap's peak marks (`memory`), the mapped bytes' marks (`memory::mapped`) and regions'
//! peak records (`marks`). Lock-free: the thread whose compare-exchange moves the mark sends
//! it. Runs inside allocation hooks: no allocation, no locks.

use core::sync::atomic::{AtomicI64, Ordering};

/// A new mark needs the value at least this far above the last one (and 1% above it).
const MIN_STEP: i64 = 1 << 20;

/// The value of the last mark sent.
pub struct LastMark(AtomicI64);

impl LastMark {
    pub const fn new() -> LastMark {
        LastMark(AtomicI64::new(0))
    }

    /// The last mark, if `now` is 1% and 1 MiB above it (one relaxed load and compare). The
    /// sum saturates: a mark near `i64::MAX` is never passed by wrapping around.
    #[inline(always)]
    pub fn due(&self, now: i64) -> Option<i64> {
        let last = self.0.load(Ordering::Relaxed);
        (now > last.saturating_add((last / 100).max(MIN_STEP))).then_some(last)
    }

    /// Move the mark from `last` (what [`due`](Self::due) returned) to `now`: `true` for the one
    /// thread that did, which sends the mark.
    #[inline]
    pub fn claim(&self, last: i64, now: i64) -> bool {
        self.0
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether this thread is to send a mark at `now`: due, and claimed.
    #[inline]
    pub fn passed(&self, now: i64) -> bool {
        self.due(now).is_some_and(|last| self.claim(last, now))
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Start again from `value` (a region's begin, a fork child's inherited heap).
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    #[test]
    fn a_mark_needs_one_percent_and_one_mib() {
        let m = LastMark::new();
        assert_eq!(m.due(MIB), None, "1 MiB above 0 is not past it");
        assert_eq!(m.due(MIB + 1), Some(0));
        assert!(m.passed(MIB + 1));
        assert_eq!(m.get(), MIB + 1);
        // Below 100 MiB the step is 1 MiB; above it, 1%.
        m.set(50 * MIB);
        assert!(!m.passed(51 * MIB));
        assert!(m.passed(51 * MIB + 1));
        m.set(1000 * MIB);
        assert!(!m.passed(1010 * MIB));
        assert!(m.passed(1010 * MIB + 1));
    }

    #[test]
    fn the_step_saturates_instead_of_wrapping() {
        let m = LastMark::new();
        m.set(i64::MAX - 5);
        assert_eq!(m.due(i64::MAX), None);
        m.set(i64::MAX / 2);
        assert_eq!(m.due(i64::MAX), Some(i64::MAX / 2));
    }

    #[test]
    fn one_thread_claims_a_mark() {
        let m = LastMark::new();
        let last = m.due(2 * MIB).unwrap();
        assert!(m.claim(last, 2 * MIB));
        assert!(!m.claim(last, 3 * MIB), "another thread moved it first");
        assert_eq!(m.get(), 2 * MIB);
    }
}
