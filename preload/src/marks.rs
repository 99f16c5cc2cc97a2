//! Regions the program marks itself (`mlprof.mark(...)`, one test of the pytest plugin),
//! exported for `ctypes`: `mlprof_region_begin`, `mlprof_region_end`, `mlprof_active`. Each
//! begin and end sends a [`Kind::Region`](mlprof_wire::Kind::Region) record; while a region is
//! open the exact heap high inside it is kept, so the caller learns its region's exact peak
//! at once, without waiting for the collector. Regions nest (per process, up to
//! [`MAX_DEPTH`]); one may end before a region opened inside it (another thread's).
//!
//! Cost in allocation hooks: [`allocated`] is one relaxed load and compare; the rest runs only
//! when the heap reaches a new high inside an open region. The exported calls are made by the
//! program's own code (never from a hook or a signal handler) and take a short spin lock among
//! themselves.

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

use libc::c_int;
use mlprof_wire::{region_phase, Record, Region, DATA_BYTES, MAX_REGION_NAME};

use crate::peak::LastMark;
use crate::{channel, clock, heap};

/// Deepest nesting of regions; a begin beyond it is refused (returns 0).
pub const MAX_DEPTH: usize = 32;
/// No region open: no heap can exceed it.
const NONE_OPEN: i64 = i64::MAX;

/// Highest heap since the innermost open region began ([`NONE_OPEN`] when none is open).
static HIGH: AtomicI64 = AtomicI64::new(NONE_OPEN);
/// Heap of the innermost region's last peak record (or its begin).
static LAST_SENT: LastMark = LastMark::new();
/// The innermost open region's id (0: none).
static CURRENT: AtomicU64 = AtomicU64::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static DEPTH: AtomicUsize = AtomicUsize::new(0);
/// A region's (high, last sent, id), saved while an inner one is open.
type Saved = [AtomicU64; 3];
/// The enclosing regions' states: `SAVED[j]` that of the region at level `j` (1-based; `SAVED[0]`
/// that of no region open), saved when the one at level `j + 1` began.
static SAVED: [Saved; MAX_DEPTH] =
    [const { [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)] }; MAX_DEPTH];
static LOCK: AtomicBool = AtomicBool::new(false);

/// After an allocation brought the heap to `now`.
#[inline]
pub fn allocated(now: i64) {
    if now > HIGH.load(Ordering::Relaxed) {
        rise(now);
    }
}

#[cold]
fn rise(now: i64) {
    HIGH.fetch_max(now, Ordering::Relaxed);
    if LAST_SENT.passed(now) {
        let region = Region {
            id: CURRENT.load(Ordering::Relaxed),
            phase: region_phase::PEAK,
            heap: now,
            peak: now,
            ..Region::default()
        };
        channel::send(&Record::region(clock::tid(), clock::monotonic_ns(), region));
    }
}

/// A fork child starts with no region open (its parent's stay its parent's), and the lock
/// free (the thread that may have held it at the fork does not exist in the child).
pub fn forget_in_child() {
    HIGH.store(NONE_OPEN, Ordering::Relaxed);
    CURRENT.store(0, Ordering::Relaxed);
    DEPTH.store(0, Ordering::Relaxed);
    LOCK.store(false, Ordering::Release);
}

struct Locked;

impl Locked {
    fn take() -> Locked {
        let mut spins = 0u32;
        while LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins.is_multiple_of(64) {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            } else {
                core::hint::spin_loop();
            }
        }
        Locked
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        LOCK.store(false, Ordering::Release);
    }
}

fn heap_now() -> i64 {
    heap::counters().current.load(Ordering::Relaxed)
}

/// Close the innermost region (at `depth`), `saved` the state of the region it was in: its
/// high goes to that region.
fn close_innermost(saved: &Saved, depth: usize, now: i64) -> i64 {
    let high = HIGH.load(Ordering::Relaxed).max(now);
    let outer_high = saved[0].load(Ordering::Relaxed) as i64;
    HIGH.store(
        if outer_high == NONE_OPEN {
            NONE_OPEN
        } else {
            outer_high.max(high)
        },
        Ordering::Relaxed,
    );
    LAST_SENT.set(saved[1].load(Ordering::Relaxed) as i64);
    CURRENT.store(saved[2].load(Ordering::Relaxed), Ordering::Relaxed);
    DEPTH.store(depth - 1, Ordering::Relaxed);
    high
}

/// Close the region at `level` (1-based, below the innermost), whose state was saved in
/// `open[level]` when the next one began (`open`: `SAVED` up to the depth): its high is the
/// highest of its own and of every region opened inside it; what it had while innermost goes to
/// the region it was in, and the regions inside it now sit in that one.
fn close_enclosing(open: &[Saved], level: usize, now: i64) -> i64 {
    let high_of = |saved: &Saved| saved[0].load(Ordering::Relaxed) as i64;
    // This region's state and those of the regions inside it (but the innermost).
    let inside = open.get(level..).unwrap_or_default();
    let high = inside
        .iter()
        .map(high_of)
        .fold(HIGH.load(Ordering::Relaxed).max(now), i64::max);
    if level > 1 {
        if let Some([outer, this]) = open.get(level - 1..=level) {
            let merged = high_of(outer).max(high_of(this));
            outer[0].store(merged as u64, Ordering::Relaxed);
        }
    }
    for pair in inside.windows(2) {
        if let [to, from] = pair {
            for (to, from) in to.iter().zip(from) {
                to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    }
    DEPTH.store(open.len() - 1, Ordering::Relaxed);
    high
}

/// 1 when this process is profiled (its channel is attached), else 0.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn mlprof_active() -> c_int {
    channel::ring().is_some() as c_int
}

/// Open a region named by the `len` UTF-8 bytes at `name` (cut at 1024 bytes). Returns its id,
/// or 0 when the process is not profiled or regions are nested too deep; `*heap_out` (when not
/// null) receives the exact heap in bytes at the start.
///
/// # Safety
/// `name` points to `len` readable bytes (or `len` is 0); `heap_out` is null or writable.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mlprof_region_begin(
    name: *const u8,
    len: usize,
    heap_out: *mut i64,
) -> u64 {
    let Some(ring) = channel::ring() else {
        return 0;
    };
    let name: &[u8] = if name.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract: `len` readable bytes at `name`.
        unsafe { core::slice::from_raw_parts(name, len.min(MAX_REGION_NAME)) }
    };
    let _lock = Locked::take();
    let depth = DEPTH.load(Ordering::Relaxed);
    let Some(saved) = SAVED.get(depth) else {
        return 0; // MAX_DEPTH regions open
    };
    saved[0].store(HIGH.load(Ordering::Relaxed) as u64, Ordering::Relaxed);
    saved[1].store(LAST_SENT.get() as u64, Ordering::Relaxed);
    saved[2].store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
    DEPTH.store(depth + 1, Ordering::Relaxed);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let now = heap_now();
    CURRENT.store(id, Ordering::Relaxed);
    LAST_SENT.set(now);
    HIGH.store(now, Ordering::Relaxed);
    let region = Region {
        id,
        phase: region_phase::BEGIN,
        name_len: name.len() as u32,
        heap: now,
        peak: now,
        report: 0,
    };
    let chunks = name.len().div_ceil(DATA_BYTES) as u64;
    if let Some(group) = ring.reserve(1 + chunks) {
        group.set(
            0,
            &Record::region(clock::tid(), clock::monotonic_ns(), region),
        );
        for (i, chunk) in name.chunks(DATA_BYTES).enumerate() {
            let mut bytes = [0u8; DATA_BYTES];
            for (to, &from) in bytes.iter_mut().zip(chunk) {
                *to = from;
            }
            group.set(1 + i as u64, &Record::data(&bytes));
        }
    }
    if !heap_out.is_null() {
        // SAFETY: the caller's contract: `heap_out` is writable.
        unsafe { *heap_out = now };
    }
    id
}

/// Close region `id` (usually the innermost open one). With `report` non-zero the collector is
/// asked to write its report of the region: 1 its summary, 2 also its lines and page (see
/// docs/design/regions.md). `out` (when not null)
/// receives `[highest heap since the begin, heap now]`, exact bytes. Returns 0, or -1 when
/// `id` is not an open region (nothing is closed).
///
/// # Safety
/// `out` is null or points to two writable `i64`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mlprof_region_end(id: u64, report: c_int, out: *mut i64) -> c_int {
    let _lock = Locked::take();
    let depth = DEPTH.load(Ordering::Relaxed);
    let open = SAVED.get(..depth).unwrap_or_default();
    let Some(innermost) = open.last().filter(|_| id != 0) else {
        return -1; // no region open
    };
    let now = heap_now();
    let high = if CURRENT.load(Ordering::Relaxed) == id {
        close_innermost(innermost, depth, now)
    } else {
        // Another thread's region opened inside this one and is still open.
        let is_it = |saved: &Saved| saved[2].load(Ordering::Relaxed) == id;
        match open.iter().skip(1).position(is_it) {
            Some(i) => close_enclosing(open, i + 1, now),
            None => return -1,
        }
    };
    let region = Region {
        id,
        phase: region_phase::END,
        report: report.clamp(0, 255) as u8,
        name_len: 0,
        heap: now,
        peak: high,
    };
    if let Some(ring) = channel::ring() {
        ring.push(&Record::region(clock::tid(), clock::monotonic_ns(), region));
        if report != 0 {
            // After the record: the collector drains when it sees the count change.
            ring.header()
                .region_requests
                .fetch_add(1, Ordering::Release);
        }
    }
    if !out.is_null() {
        // SAFETY: the caller's contract: two writable i64 at `out`.
        unsafe {
            *out = high;
            *out.add(1) = now;
        }
    }
    0
}
