//! Where the exact heap counters live. Before the channel exists they are process-local
//! (`BOOT`); once attached they live in the shared channel header, so the collector reads
//! them at any moment, even after the process is killed. Runs inside allocation hooks.

use core::sync::atomic::{AtomicPtr, Ordering};

use mlprof_wire::HeapCounters;

static BOOT: HeapCounters = HeapCounters::new();
static COUNTERS: AtomicPtr<HeapCounters> = AtomicPtr::new(&BOOT as *const _ as *mut _);

/// The counters allocation hooks update.
#[inline]
pub fn counters() -> &'static HeapCounters {
    // SAFETY: COUNTERS always points to BOOT or to a channel header's counters, which stay
    // mapped for the rest of the process (channels are never unmapped while in use).
    unsafe { &*COUNTERS.load(Ordering::Acquire) }
}

/// Move accounting to `shared` (a freshly attached channel), carrying over what was counted
/// so far; `inherited` replaces the current value (a fork child starts from its parent's heap).
pub fn publish(shared: &'static HeapCounters, inherited: Option<i64>) {
    let old = counters();
    match inherited {
        Some(bytes) => shared.reset_to(bytes),
        None => {
            let current = old.current.load(Ordering::Relaxed);
            shared.current.store(current, Ordering::Relaxed);
            shared.peak.store(
                old.peak.load(Ordering::Relaxed).max(current),
                Ordering::Relaxed,
            );
            shared
                .total
                .store(old.total.load(Ordering::Relaxed), Ordering::Relaxed);
            shared
                .count
                .store(old.count.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
    COUNTERS.store(shared as *const _ as *mut _, Ordering::Release);
}

/// Count in this process only again, from `bytes` (a fork child that is not followed: its
/// parent's shared counters must not see its allocations).
pub fn detach(bytes: i64) {
    BOOT.reset_to(bytes);
    COUNTERS.store(&BOOT as *const _ as *mut _, Ordering::Release);
}
