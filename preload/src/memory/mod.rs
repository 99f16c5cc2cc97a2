//! Memory attribution: Poisson sampling of allocations and copies with the Python stack
//! ([`sampler`]), the set of sampled blocks still alive ([`live`]), peak marks, and the
//! wrapper around Python's own allocator ([`pymem`]).

pub mod free_threaded;
pub mod live;
pub mod mapped;
mod mimalloc;
pub mod pymem;
pub mod regions;
pub mod sampler;

use mlprof_wire::Record;

use crate::local;
use crate::peak::LastMark;
use crate::{channel, clock};

/// Heap value of the last peak mark sent.
static LAST_MARK: LastMark = LastMark::new();

/// After an allocation that brought the heap to `now`: sample it if due, and mark a new peak.
#[inline]
pub fn allocated(addr: usize, size: usize, now: i64, flags: u32) {
    if sampler::alloc_sampling() {
        local::with(|l| {
            // Inside mlprof, or inside Python's allocator called by our wrapper (which samples
            // those bytes itself): count only.
            let Some(_entered) = l.enter() else { return };
            if let Some(weight) = sampler::alloc_due(l, size) {
                pymem::install_if_ready();
                let gil = crate::python::runtime::holds_gil();
                sampler::record_alloc(addr, size, weight, flags, sampler::reads(gil));
            }
        });
    }
    crate::marks::allocated(now);
    mark_if_due(now);
}

/// Send a peak mark if the heap, now `now`, passed the last mark by 1% and 1 MiB.
#[inline(always)]
pub fn mark_if_due(now: i64) {
    if let Some(last) = LAST_MARK.due(now) {
        mark(last, now);
    }
}

#[cold]
#[inline(never)]
fn mark(last: i64, now: i64) {
    // Inside Python's allocator wrapper: the block is sampled after this malloc returns, and
    // the wrapper marks then (`pymem::allocate`), so that a block that makes the peak is
    // sampled before its mark (else it would not count as held at the peak).
    if local::with(|l| l.busy()) {
        return;
    }

    if LAST_MARK.claim(last, now) {
        let mark = Record::peak_mark(clock::tid(), clock::monotonic_ns(), now as u64);
        channel::send(&mark);
    }
}

/// Before a block is freed.
#[inline]
pub fn freeing(addr: usize) {
    if sampler::alloc_sampling() {
        sampler::record_free(addr);
    }
}

/// A fork child starts its own marks from the heap it inherited.
pub fn reset_marks(heap: i64) {
    LAST_MARK.set(heap);
}
