//! Poisson byte sampling of allocations and copies, per thread (as tcmalloc does): each
//! thread counts down a random number of bytes drawn from an exponential distribution with the
//! configured mean; the allocation that crosses zero is sampled, with the Python stack, and
//! stands for `size / (1 - exp(-size / mean))` bytes. Alloc/free churn is seen, unlike with a
//! net-bytes threshold. Runs inside allocation hooks: no allocation, no locks.

use core::cell::Cell;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::local::Local;

use mlprof_wire::{Alloc, MemCopy, Record};

use super::live;
use crate::python::stack;
use crate::{channel, clock};

/// Mean bytes between allocation samples; 0 = off.
static ALLOC_MEAN: AtomicU64 = AtomicU64::new(0);
/// Mean bytes between copy samples; 0 = off.
static COPY_MEAN: AtomicU64 = AtomicU64::new(0);

/// Configure the means (load time).
pub fn configure(alloc_mean: u64, copy_mean: u64) {
    ALLOC_MEAN.store(alloc_mean, Ordering::Relaxed);
    COPY_MEAN.store(copy_mean, Ordering::Relaxed);
}

/// Whether allocation sampling is on.
#[inline]
pub fn alloc_sampling() -> bool {
    ALLOC_MEAN.load(Ordering::Relaxed) != 0
}

/// Whether copy sampling is on.
#[inline]
pub fn copy_sampling() -> bool {
    COPY_MEAN.load(Ordering::Relaxed) != 0
}

/// Count `size` bytes against this thread's allocation countdown; `Some(weight)` if this
/// allocation is sampled.
#[inline]
pub fn alloc_due(local: &Local, size: usize) -> Option<u64> {
    due(local, &local.alloc_left, &ALLOC_MEAN, size)
}

/// The common case of [`alloc_due`] alone: `true` if sampling is off, or if counting `size`
/// bytes leaves the countdown above zero (then counted); `false` if [`alloc_due`] must be
/// asked (a sample is due, or this thread has not drawn yet), with nothing counted.
#[inline(always)]
pub fn alloc_countdown(local: &Local, size: usize) -> bool {
    countdown(&local.alloc_left, &ALLOC_MEAN, size)
}

/// The same for copies.
#[inline]
pub fn copy_due(local: &Local, size: usize) -> Option<u64> {
    due(local, &local.copy_left, &COPY_MEAN, size)
}

/// `true` if sampling is off or `size` bytes leave `left` above zero (then counted). `left`
/// is 0 before the first draw on this thread: that is never counted here.
#[inline(always)]
fn countdown(left: &Cell<i64>, mean: &AtomicU64, size: usize) -> bool {
    if mean.load(Ordering::Relaxed) == 0 {
        return true;
    }
    let remaining = left.get().wrapping_sub(size as i64);
    if remaining > 0 {
        left.set(remaining);
        return true;
    }
    false
}

#[inline]
fn due(local: &Local, left: &Cell<i64>, mean: &AtomicU64, size: usize) -> Option<u64> {
    if countdown(left, mean, size) {
        return None;
    }
    due_slow(local, left, mean.load(Ordering::Relaxed), size)
}

/// The rare part of [`due`], out of line so that the hooks' common path stays short (no
/// stack frame, no floating point): the first draw on a thread, and a sample.
#[cold]
#[inline(never)]
fn due_slow(local: &Local, left: &Cell<i64>, mean: u64, size: usize) -> Option<u64> {
    if mean == 0 {
        return None; // sampling was turned off (a fork child that is not followed)
    }
    let mut remaining = left.get();
    if remaining == 0 {
        remaining = next_gap(local, mean); // first use on this thread
    }
    remaining = remaining.saturating_sub(size as i64);
    left.set(remaining);
    if remaining > 0 {
        return None;
    }
    left.set(next_gap(local, mean));
    let s = size as f64;
    let ratio = s / mean as f64;
    // exp(-ratio) underflows (and glibc sets errno = ERANGE) far beyond 700: there p is 1.
    let p = if ratio > 700.0 {
        1.0
    } else {
        1.0 - (-ratio).exp()
    };
    Some(if p > 0.0 { (s / p) as u64 } else { mean })
}

/// The thread's next uniform draw in (0, 1) (its xorshift generator, seeded on first use from
/// the thread id and the clock). Shared by the allocation, copy and launch samplers.
pub fn uniform(local: &Local) -> f64 {
    let mut x = local.rng.get();
    if x == 0 {
        x = 0x2545_F491_4F6C_DD1D ^ (clock::tid() as u64) << 20 ^ clock::monotonic_ns();
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    local.rng.set(x);
    ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Exponential gap with the given mean.
fn next_gap(local: &Local, mean: u64) -> i64 {
    let uniform = uniform(local);
    (-(uniform.ln()) * mean as f64).max(1.0) as i64
}

/// How an allocation or copy point may read its own thread's stack: plain loads when the
/// thread holds the GIL (always true inside Python's allocator; asked of the interpreter for
/// `malloc` and copies) outside finalization, else through the kernel. See
/// docs/design/memory-sampling.md for what each costs.
pub fn reads(gil_held: bool) -> stack::Reads {
    if gil_held && !crate::python::runtime::finalizing() {
        stack::Reads::Trusted
    } else {
        stack::Reads::Checked
    }
}

/// Record a sampled allocation at `addr` and remember it as live; `reads` as [`reads`] says.
pub fn record_alloc(addr: usize, size: usize, weight: u64, flags: u32, reads: stack::Reads) {
    let _errno = crate::errno::Saved::new(); // reading the stack makes system calls
    if !live::insert(addr) {
        return; // table full: a sample we could not follow to its free is worse than none
    }
    stack::send(reads, |tid, ts_ns, stack| {
        let alloc = Alloc {
            addr: addr as u64,
            size: size as u64,
            weight,
            depth: stack.depth as u32,
            flags,
        };
        Record::alloc(tid, ts_ns, alloc)
    });
}

/// A block is being freed: tell the collector if it was a sampled one. Frees during interpreter
/// shutdown are not told: what a program still holds at its end stays live (leak evidence).
#[inline(always)]
pub fn record_free(addr: usize) {
    if live::may_hold(addr) {
        record_free_slow(addr);
    }
}

/// The rare part of [`record_free`]: the address may be a sampled block.
#[cold]
#[inline(never)]
fn record_free_slow(addr: usize) {
    if live::remove(addr) && !crate::python::runtime::finalizing() {
        let freed = Record::free(clock::tid(), clock::monotonic_ns(), addr as u64);
        channel::send(&freed);
    }
}

/// The mapping at `from` was cut in part, `parts` (start, length) left of it and counted
/// under their own starts. If it was a sampled one, each part is told as its remainder, to
/// keep its line and share of its weight, before the mapping's free (which the collector
/// needs to find it by), and becomes a sampled block itself; otherwise nothing is sent.
pub fn record_cut(from: usize, parts: &[(usize, usize)]) {
    if !live::may_hold(from) || !live::remove(from) {
        return;
    }
    if crate::python::runtime::finalizing() {
        return; // as `record_free`: what is held at the end stays live
    }
    let (tid, now) = (clock::tid(), clock::monotonic_ns());
    let mut replaced = false;
    for &(start, length) in parts {
        if live::insert(start) {
            channel::send(&Record::mapped_cut(
                tid,
                now,
                start as u64,
                length as u64,
                from as u64,
            ));
            replaced |= start == from;
        }
    }
    // A part sent at the same start replaces the mapping there (the collector frees the old
    // one); otherwise the mapping is freed here.
    if !replaced {
        channel::send(&Record::free(tid, now, from as u64));
    }
}

/// Record a sampled copy of `size` bytes.
pub fn record_copy(size: usize, weight: u64, reads: stack::Reads) {
    let _errno = crate::errno::Saved::new(); // reading the stack makes system calls
    stack::send(reads, |tid, ts_ns, stack| {
        let copy = MemCopy {
            bytes: size as u64,
            weight,
            depth: stack.depth as u32,
        };
        Record::copy(tid, ts_ns, copy)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_is_unbiased_for_small_and_large_allocations() {
        let mean = 64 * 1024;
        configure(mean, 0);
        for size in [64usize, 4096, 1 << 20] {
            let (mut estimated, mut total) = (0u64, 0u64);
            // About 2000 expected samples (or every allocation, for large ones): +-2.5%.
            let n = (2000 * mean as usize / size).max(2000);
            for _ in 0..n {
                total += size as u64;
                estimated += crate::local::with(|l| alloc_due(l, size)).unwrap_or(0);
            }
            let ratio = estimated as f64 / total as f64;
            assert!(
                (0.85..1.15).contains(&ratio),
                "size {size}: estimate/truth {ratio}"
            );
        }
        configure(0, 0);
    }
}
