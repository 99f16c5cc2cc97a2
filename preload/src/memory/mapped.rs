//! Anonymous mappings the program makes itself (`mmap`, `munmap`, `mremap` called directly:
//! allocators linked into wheels, Python's `mmap` module, array libraries' buffers), counted
//! apart from the heap: exact bytes mapped now and at most, peak marks, and sampled with their
//! Python line like allocations (flag `MAPPED`). glibc's malloc maps its large blocks through
//! internal calls these hooks never see, so nothing is counted twice. Not counted: mappings
//! that cannot be written (`PROT_NONE` reservations), files, Python's own arenas (in the heap
//! already), and mappings made before Python's allocator was wrapped. Pages given back with
//! `madvise` (`MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE`) count as unmapped.
//! See docs/design/mapped-memory.md. Runs inside hooks: no allocation, no locks.

use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use mlprof_wire::{alloc_flags, HeapCounters, Record};

use super::{pymem, sampler};
use crate::peak::LastMark;
use crate::table::Table;
use crate::{channel, clock, local};

const SLOTS: usize = 1 << 12;
const PROBES: usize = 64;
const PAGE: usize = 4096;

/// The mappings counted now: start → length.
static MAPPINGS: Table<AtomicUsize, SLOTS, PROBES> = Table::new();
/// Entries in the table: unmapping costs nothing while it is empty.
static LIVE: AtomicUsize = AtomicUsize::new(0);

static BOOT: HeapCounters = HeapCounters::new();
static COUNTERS: AtomicPtr<HeapCounters> = AtomicPtr::new(&BOOT as *const _ as *mut _);
/// Mapped bytes of the last mark sent.
static LAST_MARK: LastMark = LastMark::new();

/// The counters of mapped bytes (process-local until the channel exists, then its header's).
#[inline]
pub fn counters() -> &'static HeapCounters {
    // SAFETY: COUNTERS points to BOOT or to a channel header's counters, which stay mapped for
    // the rest of the process (as `heap::counters`).
    unsafe { &*COUNTERS.load(Ordering::Acquire) }
}

/// Count in `shared` (a freshly attached channel's header) from now on, with what was counted
/// so far.
pub fn publish(shared: &'static HeapCounters) {
    let old = counters();
    for (to, from) in [(&shared.current, &old.current), (&shared.peak, &old.peak)] {
        to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    shared
        .total
        .store(old.total.load(Ordering::Relaxed), Ordering::Relaxed);
    shared
        .count
        .store(old.count.load(Ordering::Relaxed), Ordering::Relaxed);
    COUNTERS.store(shared as *const _ as *mut _, Ordering::Release);
}

/// A fork child: the mappings it inherited are its parent's. Starts from nothing, counting in
/// this process only until it has a channel of its own.
pub fn forget_in_child() {
    MAPPINGS.clear();
    LIVE.store(0, Ordering::Relaxed);
    LAST_MARK.set(0);
    BOOT.reset_to(0);
    COUNTERS.store(&BOOT as *const _ as *mut _, Ordering::Release);
}

#[inline]
fn pages(len: usize) -> usize {
    len.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// `mmap` returned `addr` for `len` bytes with these `prot` and `flags`.
pub fn mapped(addr: usize, len: usize, prot: i32, flags: i32) {
    if flags & libc::MAP_FIXED != 0 {
        unmapped(addr, len); // the kernel replaced whatever was there
    }
    // Read-write anonymous memory, whatever the flags: bundled allocators (jemalloc in polars)
    // map their extents `MAP_NORESERVE`. Reservations (`PROT_NONE`, read-only) hold no data.
    if flags & libc::MAP_ANONYMOUS == 0 || prot & libc::PROT_WRITE == 0 || len == 0 {
        return;
    }
    local::with(|l| {
        // Inside mlprof, or inside Python's arena allocator (arenas are heap): not counted.
        let Some(_entered) = l.enter() else { return };
        if pymem::arenas_uncounted() {
            return; // Python's own arenas cannot be told apart yet
        }
        add(l, addr, pages(len));
    });
}

/// Count a new mapping and sample it.
fn add(l: &local::Local, addr: usize, len: usize) {
    if !insert(addr, len) {
        return; // table full: a mapping we could not follow to its unmapping is not counted
    }
    let now = counters().add(len as u64);
    if let Some(weight) = sampler::alloc_due(l, len) {
        let gil = crate::python::runtime::holds_gil();
        sampler::record_alloc(addr, len, weight, alloc_flags::MAPPED, sampler::reads(gil));
    }
    if LAST_MARK.passed(now) {
        let mark = Record::mapped_mark(clock::tid(), clock::monotonic_ns(), now as u64);
        channel::send(&mark);
    }
}

/// `munmap(addr, len)` succeeded: forget what it covered. What is left of a mapping cut in
/// part stays counted under its new start; where that mapping was sampled, so are its parts,
/// at its line (`sampler::record_cut`), and it is not sampled again: an allocator purging an
/// extent from another thread, later, does not move it to the line running then.
pub fn unmapped(addr: usize, len: usize) {
    if LIVE.load(Ordering::Relaxed) == 0 || len == 0 {
        return;
    }
    let (lo, hi) = (addr, addr.saturating_add(pages(len)));
    // (start, length) of each part left, and the start of the mapping it is left of: at most
    // the head of the first mapping cut and the tail of the last.
    let mut left = [(0usize, 0usize, 0usize); 2];
    let mut n = 0;
    let mut cut = |start: usize, length: usize| {
        let end = start + length;
        counters().sub((end.min(hi) - start.max(lo)) as u64);
        let before = n;
        for (a, b) in [(start, lo.min(end)), (hi.max(start), end)] {
            if let Some(slot) = left.get_mut(n).filter(|_| a < b) {
                *slot = (a, b - a, start);
                n += 1;
            }
        }
        if n == before {
            sampler::record_free(start); // gone whole
        }
    };
    match take(lo) {
        Some(length) => cut(lo, length),
        // Not a start: the tail or middle of a mapping, or several mappings.
        None => scan(lo, hi, &mut cut),
    }
    // What is left of cut mappings stays counted (already), under a new start; the parts of
    // one mapping are next to each other (both come from one call of `cut`).
    let left = left.get(..n).unwrap_or(&[]);
    let mut kept = [(0usize, 0usize); 2];
    let mut k = 0;
    for (i, &(start, length, of)) in left.iter().enumerate() {
        if insert(start, length) {
            if let Some(slot) = kept.get_mut(k) {
                *slot = (start, length);
                k += 1;
            }
        } else {
            counters().sub(length as u64);
        }
        if left.get(i + 1).is_none_or(|next| next.2 != of) {
            sampler::record_cut(of, kept.get(..k).unwrap_or(&[]));
            k = 0;
        }
    }
}

/// `madvise(addr, len, advice)` succeeded: an allocator giving pages back while keeping the
/// mapping (`MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE`): they count as unmapped.
pub fn advised(addr: usize, len: usize, advice: i32) {
    if matches!(
        advice,
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE
    ) {
        unmapped(addr, len);
    }
}

/// `mremap` moved or resized the mapping at `old` (`old_len` bytes) to `new` (`new_len`).
/// Counted only if the old one was.
pub fn remapped(old: usize, old_len: usize, new: usize, new_len: usize) {
    if LIVE.load(Ordering::Relaxed) == 0 || old_len == 0 {
        return;
    }
    let Some(length) = take(old) else { return };
    let moved = pages(old_len).min(length);
    if length > moved && !insert(old + moved, length - moved) {
        counters().sub((length - moved) as u64); // the part beyond `old_len` stays where it was
    }
    counters().sub(moved as u64);
    sampler::record_free(old);
    local::with(|l| {
        if let Some(_entered) = l.enter() {
            add(l, new, pages(new_len));
        }
    });
}

/// Remember a counted mapping; `false` if the table is full.
fn insert(start: usize, len: usize) -> bool {
    let inserted = MAPPINGS.insert(hash(start), start, len);
    if inserted {
        LIVE.fetch_add(1, Ordering::Relaxed);
    }
    inserted
}

/// Forget the counted mapping starting at `start`; its length, if it was counted.
fn take(start: usize) -> Option<usize> {
    let len = MAPPINGS.remove(hash(start), start)?;
    LIVE.fetch_sub(1, Ordering::Relaxed);
    Some(len)
}

/// Every counted mapping that overlaps `lo..hi`, forgotten and handed to `cut`.
fn scan(lo: usize, hi: usize, cut: &mut dyn FnMut(usize, usize)) {
    MAPPINGS.remove_each(
        |start, len| start < hi && start.saturating_add(len) > lo,
        |start, len| {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            cut(start, len);
        },
    );
}

#[inline]
fn hash(addr: usize) -> usize {
    (addr >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current() -> i64 {
        counters().current.load(Ordering::Relaxed)
    }

    #[test]
    fn mappings_are_counted_until_unmapped_in_whole_or_in_part() {
        forget_in_child();
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // Apart from the addresses other tests use (the live set is shared).
        let base = 0x5a00_0000_0000usize;
        mapped(base, 10 * PAGE, rw, anon);
        assert_eq!(current(), 10 * PAGE as i64);
        // Reservations, read-only memory and files are not memory the program fills.
        mapped(base + (1 << 30), 1 << 30, libc::PROT_NONE, anon);
        mapped(base + (3 << 30), 1 << 20, rw, libc::MAP_PRIVATE);
        mapped(base + (5 << 30), 1 << 20, libc::PROT_READ, anon);
        assert_eq!(current(), 10 * PAGE as i64);
        // A bundled allocator's extent (jemalloc in polars: MAP_NORESERVE) is; pages it gives
        // back with madvise are not, other advice changes nothing.
        mapped(base + (2 << 30), 16 * PAGE, rw, anon | libc::MAP_NORESERVE);
        assert_eq!(current(), 26 * PAGE as i64);
        advised(base + (2 << 30), 4 * PAGE, libc::MADV_DONTNEED);
        advised(base + (2 << 30) + 4 * PAGE, 4 * PAGE, libc::MADV_FREE);
        advised(base + (2 << 30) + 8 * PAGE, 8 * PAGE, libc::MADV_HUGEPAGE);
        assert_eq!(current(), 18 * PAGE as i64);
        unmapped(base + (2 << 30), 16 * PAGE);
        assert_eq!(current(), 10 * PAGE as i64);
        // Head, tail and middle cut off: the rest stays counted.
        unmapped(base, PAGE);
        unmapped(base + 9 * PAGE, PAGE);
        unmapped(base + 4 * PAGE, 2 * PAGE);
        assert_eq!(current(), 6 * PAGE as i64);
        // Moved and grown.
        remapped(base + PAGE, 3 * PAGE, base + (4 << 30), 8 * PAGE);
        assert_eq!(current(), 11 * PAGE as i64);
        // One call over several mappings, and over memory never counted.
        unmapped(base, 1 << 30);
        assert_eq!(current(), 8 * PAGE as i64);
        unmapped(base + (4 << 30), 8 * PAGE);
        assert_eq!(current(), 0);
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
        assert_eq!(counters().peak.load(Ordering::Relaxed), 26 * PAGE as i64);
        forget_in_child();
        assert_eq!(counters().peak.load(Ordering::Relaxed), 0);
    }
}
