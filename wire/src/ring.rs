//! The shared-memory layout of one process's channel and the lock-free ring inside it.
//!
//! Writers (any thread of the target, including signal handlers) reserve a slot with a
//! compare-and-swap on `head`, fill it, then publish it by storing its sequence number. The one
//! reader (the collector) consumes slots in order and advances `tail`. A full ring never
//! blocks a writer: the record is dropped and `dropped` counts it. A writer that dies between
//! reserving and publishing (SIGKILL) leaves a hole the reader skips once the process is gone.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};

use crate::record::Record;
use crate::{CMDLINE_BYTES, MAGIC, PYVERSION_BYTES, VERSION};

/// Exact heap counters of one process, updated by every allocation hook.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct HeapCounters {
    /// Bytes currently allocated (usable sizes). Signed: a block allocated before the
    /// counters existed and freed later may push it briefly below the truth.
    pub current: AtomicI64,
    /// Highest value `current` ever reached.
    pub peak: AtomicI64,
    /// Bytes allocated in total (never decremented).
    pub total: AtomicU64,
    /// Number of allocations.
    pub count: AtomicU64,
}

impl HeapCounters {
    /// A zeroed set of counters (usable in a `static`).
    pub const fn new() -> HeapCounters {
        HeapCounters {
            current: AtomicI64::new(0),
            peak: AtomicI64::new(0),
            total: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Account an allocation of `bytes`; returns the heap after it. Lock-free; three or four
    /// atomic operations.
    #[inline]
    pub fn add(&self, bytes: u64) -> i64 {
        let signed = bytes as i64;
        let now = self.current.fetch_add(signed, Ordering::Relaxed) + signed;
        self.total.fetch_add(bytes, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        now
    }

    /// Account what one thread gathered: `delta` bytes more in use (negative: fewer), from
    /// `count` allocations of `bytes` in total; returns the heap after it.
    #[inline]
    pub fn add_batch(&self, delta: i64, bytes: u64, count: u64) -> i64 {
        let now = self.current.fetch_add(delta, Ordering::Relaxed) + delta;
        if bytes > 0 {
            self.total.fetch_add(bytes, Ordering::Relaxed);
            self.count.fetch_add(count, Ordering::Relaxed);
        }
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        now
    }

    /// Account a release of `bytes`.
    #[inline]
    pub fn sub(&self, bytes: u64) {
        self.current.fetch_sub(bytes as i64, Ordering::Relaxed);
    }

    /// Start from an inherited heap (a fork child): current and peak = `bytes`.
    pub fn reset_to(&self, bytes: i64) {
        self.current.store(bytes, Ordering::Relaxed);
        self.peak.store(bytes, Ordering::Relaxed);
        self.total.store(0, Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
    }
}

/// An atomic on a cache line of its own, so writers and the reader do not false-share.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Padded(pub AtomicU64);

/// The fixed start of a channel file. Written by the target; read by the collector.
#[repr(C, align(64))]
pub struct Header {
    /// [`MAGIC`], stored last (release) once everything else is initialised.
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: u32,
    /// `size_of::<Header>()` as the writer saw it.
    pub header_bytes: u32,
    /// Number of ring slots (a power of two).
    pub slots: u64,
    /// Process id.
    pub pid: u32,
    /// Parent process id at attach time.
    pub ppid: u32,
    /// `CLOCK_MONOTONIC` nanoseconds when the process attached.
    pub start_ns: u64,
    /// 1 if this process is a fork child that inherited its parent's heap.
    pub forked: u32,
    /// Regions that ended asking for the collector's report (a count the collector watches
    /// between its ticks, to answer within milliseconds rather than a tick).
    pub region_requests: AtomicU32,
    /// Heap bytes a fork child inherited from its parent (0 otherwise).
    pub inherited_heap: u64,
    /// For a fork child: `CLOCK_MONOTONIC` nanoseconds taken in the parent just before the
    /// fork (0 otherwise). A reading of another process made before it surely preceded the
    /// fork; the child's `start_ns` may be well after it on a loaded machine.
    pub fork_ns: u64,
    /// For a fork child: Python frames of the forking thread at the fork (the frame that
    /// called `fork` and those below it, inherited from the parent); 0 if unknown or not a
    /// fork child.
    pub fork_depth: AtomicU32,
    /// The process's rank in a distributed job, from its environment when it attached
    /// (`RANK`, else `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `JAX_PROCESS_ID`);
    /// -1 if none. See [`crate::RANK_VARIABLES`].
    pub rank: i32,
    /// Its local rank on the node (`LOCAL_RANK`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`,
    /// `MPI_LOCALRANKID`); -1 if none.
    pub local_rank: i32,
    /// The job's number of ranks (`WORLD_SIZE`, `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE`,
    /// `PMI_SIZE`, `JAX_NUM_PROCESSES`); -1 if none.
    pub world_size: i32,
    /// One of [`crate::state`].
    pub state: AtomicU32,
    /// Exit code, valid when `state` is `EXITED`.
    pub exit_code: AtomicI32,
    /// Set to 1 by the collector when it stops reading this channel (the run has ended while
    /// the process goes on): the process then stops sampling.
    pub collector_gone: AtomicU32,
    /// `CLOCK_MONOTONIC` nanoseconds of the exit, valid when `state` is `EXITED`.
    pub exit_ns: AtomicU64,
    /// Python version (`3.11.7`), NUL-padded; empty if the process is not a Python interpreter.
    pub python_version: [u8; PYVERSION_BYTES],
    /// One of [`crate::python_status`].
    pub python_status: AtomicU32,
    /// How Python objects' memory is counted in `heap`: one of [`crate::python_heap`].
    pub python_heap: AtomicU32,
    /// CPU sampling interval in nanoseconds (mean; 0 if not sampling).
    pub sample_interval_ns: AtomicU32,
    /// Address of `_PyRuntime` in this process (0 if Python frames are not walked): lets the
    /// collector find the interpreter's threads.
    pub py_runtime: AtomicU64,
    /// Address of `PyCode_Type` in this process (0 if not walked).
    pub py_code_type: AtomicU64,
    /// Valid bytes in `cmdline`.
    pub cmdline_len: u32,
    /// 1 if the command line did not fit.
    pub cmdline_truncated: u32,
    /// The command line, NUL-separated arguments.
    pub cmdline: [u8; CMDLINE_BYTES],
    /// For each signal number below 32 that mlprof forwards ([`crate::FORWARDED_SIGNALS`]):
    /// `CLOCK_MONOTONIC` nanoseconds when a handler of the program last received it (0:
    /// never). Lets the collector tell whether a signal sent to the whole process group (or
    /// cgroup) already reached the program, so that it is not forwarded a second time.
    pub signal_ns: [AtomicU64; 32],
    /// Bit `sig - 1` set once the program waited for signal `sig` without a handler
    /// (`sigwait`, `sigtimedwait`, `sigwaitinfo`) or made a `signalfd` for it: it takes it
    /// from its pending set, so the collector waits for its note in [`Header::signal_ns`]
    /// before forwarding one, as for a handler.
    pub signals_waited: AtomicU64,
    /// Exact heap counters.
    pub heap: HeapCounters,
    /// Exact counters of the anonymous mappings the program made itself (`mmap`, `mremap`;
    /// not the malloc family's, not files): bytes mapped, apart from the heap.
    pub mapped: HeapCounters,
    /// Records dropped because the ring was full.
    pub dropped: Padded,
    /// Next slot position to reserve (writers).
    pub head: Padded,
    /// Next slot position to read (collector).
    pub tail: Padded,
}

/// One ring slot: a sequence number (position + 1 once published) and a record.
#[repr(C, align(64))]
pub struct Slot {
    seq: AtomicU64,
    record: UnsafeCell<Record>,
}

const _: () = assert!(core::mem::size_of::<Slot>() == 64);

/// Consecutive slots reserved by one writer ([`Ring::reserve`]).
pub struct Group<'a> {
    slots: &'a [Slot],
    start: u64,
    len: u64,
}

impl Group<'_> {
    /// Number of slots in the group.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the group has no slots (never true for a reserved group).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Write and publish slot `i` of the group. Out-of-range `i` is ignored.
    pub fn set(&self, i: u64, record: &Record) {
        if i >= self.len {
            return;
        }
        let pos = self.start.wrapping_add(i);
        let slot = &self.slots[(pos & (self.slots.len() as u64 - 1)) as usize];
        // SAFETY: position `pos` belongs to this group alone (reserved by the CAS in
        // `reserve`), and the reader does not touch the slot until `seq` says it is published.
        unsafe { *slot.record.get() = *record };
        slot.seq.store(pos + 1, Ordering::Release);
    }
}

/// Why a channel file cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The file is shorter than a header, or than its declared ring.
    TooShort,
    /// The header is not initialised yet (magic still zero).
    NotReady,
    /// The magic is not ours: not an mlprof channel.
    BadMagic,
    /// Written by another version of mlprof.
    VersionMismatch {
        /// The version in the file.
        found: u32,
    },
    /// The header's sizes are inconsistent.
    BadLayout,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WireError::TooShort => write!(f, "channel file is truncated"),
            WireError::NotReady => write!(f, "channel file is not initialised yet"),
            WireError::BadMagic => write!(f, "not an mlprof channel file (bad magic)"),
            WireError::VersionMismatch { found } => write!(
                f,
                "channel written by wire version {found}, this mlprof reads version {VERSION}"
            ),
            WireError::BadLayout => write!(f, "channel header has an inconsistent layout"),
        }
    }
}

/// A view of one mapped channel file: header plus slots.
#[derive(Clone, Copy)]
pub struct Ring<'a> {
    header: &'a Header,
    slots: &'a [Slot],
}

// SAFETY: all shared state is accessed through atomics; a slot's record is written only by
// the writer that reserved it and read only after its sequence number is published.
unsafe impl Send for Ring<'_> {}
// SAFETY: as above.
unsafe impl Sync for Ring<'_> {}

impl<'a> Ring<'a> {
    /// Initialise a zero-filled mapping as a fresh channel and return a view of it.
    /// `fill` sets the identity fields before the magic is published.
    ///
    /// # Safety
    /// `base` must point to `len` writable bytes, 64-byte aligned, zero-filled, that stay
    /// mapped for `'a`, and no other thread may use them until this returns.
    pub unsafe fn init(
        base: *mut u8,
        len: usize,
        slots: u64,
        fill: impl FnOnce(&mut Header),
    ) -> Option<Ring<'a>> {
        if !slots.is_power_of_two() || crate::file_bytes(slots) > len {
            return None;
        }
        // SAFETY: the caller guarantees exclusive, aligned, writable memory of `len` bytes,
        // which holds a Header (checked above); all-zero bytes are a valid Header.
        let header = unsafe { &mut *(base as *mut Header) };
        header.version = VERSION;
        header.header_bytes = core::mem::size_of::<Header>() as u32;
        header.slots = slots;
        fill(header);
        header.magic.store(MAGIC, Ordering::Release);
        // SAFETY: the same memory, now fully initialised and published.
        unsafe { Ring::attach(base, len) }.ok()
    }

    /// View an existing channel file.
    ///
    /// # Safety
    /// `base` must point to `len` readable and writable bytes, 64-byte aligned, mapped for
    /// `'a`. The contents may be anything: they are validated.
    pub unsafe fn attach(base: *mut u8, len: usize) -> Result<Ring<'a>, WireError> {
        if len < core::mem::size_of::<Header>() {
            return Err(WireError::TooShort);
        }
        // SAFETY: at least a Header's worth of bytes is mapped and aligned; every bit pattern
        // is a valid Header (integers, byte arrays and atomics only).
        let header = unsafe { &*(base as *const Header) };
        let magic = header.magic.load(Ordering::Acquire);
        if magic == 0 {
            return Err(WireError::NotReady);
        }
        if magic != MAGIC {
            return Err(WireError::BadMagic);
        }
        if header.version != VERSION {
            return Err(WireError::VersionMismatch {
                found: header.version,
            });
        }
        // Read once: another process may rewrite the field between a check and a use.
        // SAFETY: `header.slots` is a live, aligned u64 inside the mapped header.
        let count = unsafe { core::ptr::read_volatile(&header.slots) };
        if header.header_bytes as usize != core::mem::size_of::<Header>() {
            return Err(WireError::BadLayout);
        }
        // A power of two no larger than MAX_SLOTS, whose size is computed without overflow.
        let Some(needed) = crate::checked_file_bytes(count) else {
            return Err(WireError::BadLayout);
        };
        if needed > len {
            return Err(WireError::TooShort);
        }
        // SAFETY: the `count` slots follow the header and fit in the mapping (checked above,
        // with the same `count`); Slot is 64-byte aligned like the header size, and any bit
        // pattern is a valid Slot.
        let slots = unsafe {
            core::slice::from_raw_parts(
                base.add(core::mem::size_of::<Header>()) as *const Slot,
                count as usize,
            )
        };
        Ok(Ring { header, slots })
    }

    /// The channel header.
    pub fn header(&self) -> &'a Header {
        self.header
    }

    /// Append a record. Lock-free and async-signal-safe; returns `false` (and counts a drop)
    /// when the ring is full.
    pub fn push(&self, record: &Record) -> bool {
        match self.reserve(1) {
            Some(group) => {
                group.set(0, record);
                true
            }
            None => false,
        }
    }

    /// Reserve `n` consecutive slots, so that a multi-record event is never interleaved with
    /// other writers' records. `None` (and `n` drops counted) when they do not fit. Every slot
    /// of the group must then be [`Group::set`] exactly once.
    pub fn reserve(&self, n: u64) -> Option<Group<'a>> {
        let cap = self.slots.len() as u64;
        let mut pos = self.header.head.0.load(Ordering::Relaxed);
        loop {
            let tail = self.header.tail.0.load(Ordering::Acquire);
            if n == 0 || pos.wrapping_sub(tail).saturating_add(n) > cap {
                self.header.dropped.0.fetch_add(n, Ordering::Relaxed);
                return None;
            }
            match self.header.head.0.compare_exchange_weak(
                pos,
                pos.wrapping_add(n),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(Group {
                        slots: self.slots,
                        start: pos,
                        len: n,
                    })
                }
                Err(now) => pos = now,
            }
        }
    }

    /// Take the next published record, if any. Only one reader may call this.
    pub fn pop(&self) -> Option<Record> {
        let cap = self.slots.len() as u64;
        let tail = self.header.tail.0.load(Ordering::Relaxed);
        let slot = &self.slots[(tail & (cap - 1)) as usize];
        let next = tail.wrapping_add(1);
        if slot.seq.load(Ordering::Acquire) != next {
            return None;
        }
        // SAFETY: the writer published this slot (seq == tail + 1, acquire) and will not
        // write it again until `tail` moves past it.
        let record = unsafe { *slot.record.get() };
        self.header.tail.0.store(next, Ordering::Release);
        Some(record)
    }

    /// After the writing process is gone: skip one reserved-but-never-published slot, if the
    /// reader is stuck on one. Returns whether a slot was skipped (count it as dropped).
    pub fn skip_hole(&self) -> bool {
        let tail = self.header.tail.0.load(Ordering::Relaxed);
        let head = self.header.head.0.load(Ordering::Acquire);
        if tail >= head {
            return false;
        }
        self.header
            .tail
            .0
            .store(tail.wrapping_add(1), Ordering::Release);
        self.header.dropped.0.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Number of slots in the ring.
    pub fn capacity(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Positions reserved by writers and not yet read: `head - tail`. More than
    /// [`Ring::capacity`] means the shared counters are corrupt (no writer reserves past a
    /// full ring, and the reader never passes `head`).
    pub fn backlog(&self) -> u64 {
        let tail = self.header.tail.0.load(Ordering::Relaxed);
        let head = self.header.head.0.load(Ordering::Acquire);
        head.wrapping_sub(tail)
    }

    /// Records dropped so far.
    pub fn dropped(&self) -> u64 {
        self.header.dropped.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::record::Kind;
    use std::vec;
    use std::vec::Vec;

    #[repr(C, align(64))]
    struct Aligned([u8; 64]);

    fn buffer(slots: u64) -> Vec<Aligned> {
        let n = crate::file_bytes(slots).div_ceil(64);
        (0..n).map(|_| Aligned([0; 64])).collect()
    }

    fn ring(buf: &mut [Aligned], slots: u64) -> Ring<'_> {
        let len = buf.len() * 64;
        // SAFETY: the buffer is zeroed, aligned, exclusively borrowed and large enough.
        unsafe { Ring::init(buf.as_mut_ptr() as *mut u8, len, slots, |h| h.pid = 42) }.unwrap()
    }

    fn rec(n: u64) -> Record {
        let mut r = Record::new(Kind::ProcessStart, 1, n);
        r.a = n;
        r
    }

    #[test]
    fn records_come_out_in_order_and_full_ring_counts_drops() {
        let mut buf = buffer(8);
        let ring = ring(&mut buf, 8);
        assert_eq!(ring.header().pid, 42);
        for n in 0..10 {
            let pushed = ring.push(&rec(n));
            assert_eq!(pushed, n < 8);
        }
        assert_eq!(ring.dropped(), 2);
        let got: Vec<u64> = core::iter::from_fn(|| ring.pop()).map(|r| r.a).collect();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
        assert!(ring.push(&rec(99)));
        assert_eq!(ring.pop().map(|r| r.a), Some(99));
    }

    #[test]
    fn attach_validates_magic_version_and_size() {
        let mut buf = buffer(8);
        let len = buf.len() * 64;
        let base = buf.as_mut_ptr() as *mut u8;
        let attach = |len| {
            // SAFETY: `base` is the aligned, live buffer of at least `len` bytes.
            unsafe { Ring::attach(base, len) }.err()
        };
        assert_eq!(attach(len), Some(WireError::NotReady));
        // SAFETY: the buffer is zeroed, aligned and large enough; nothing else uses it.
        unsafe { Ring::init(base, len, 8, |_| ()) }.unwrap();
        assert_eq!(attach(len), None);
        assert_eq!(attach(len - 64), Some(WireError::TooShort));
        let header = base as *mut Header;
        // SAFETY: the header is at the start of the buffer; corrupting its version field.
        unsafe { (*header).version = 77 };
        assert_eq!(attach(len), Some(WireError::VersionMismatch { found: 77 }));
        // SAFETY: as above, corrupting the magic.
        unsafe { (*header).magic.store(7, Ordering::Relaxed) };
        assert_eq!(attach(len), Some(WireError::BadMagic));
    }

    #[test]
    fn attach_refuses_huge_or_odd_slot_counts_without_overflow() {
        let mut buf = buffer(8);
        let len = buf.len() * 64;
        let base = buf.as_mut_ptr() as *mut u8;
        // SAFETY: the buffer is zeroed, aligned and large enough; nothing else uses it.
        unsafe { Ring::init(base, len, 8, |_| ()) }.unwrap();
        let header = base as *mut Header;
        // 2^58 slots of 64 bytes is 2^64 bytes: a wrapping size check would accept it.
        for slots in [1u64 << 58, 1 << 63, crate::MAX_SLOTS * 2, 12, 0, u64::MAX] {
            // SAFETY: the header is at the start of the live buffer; corrupting `slots`.
            unsafe { (*header).slots = slots };
            // SAFETY: `base` is the aligned, live buffer of `len` bytes.
            let got = unsafe { Ring::attach(base, len) }.err();
            assert_eq!(got, Some(WireError::BadLayout), "slots {slots}");
        }
        assert_eq!(crate::checked_file_bytes(1 << 58), None);
        assert_eq!(crate::file_bytes(1 << 58), usize::MAX);
        assert_eq!(
            crate::checked_file_bytes(crate::MAX_SLOTS),
            Some(crate::file_bytes(crate::MAX_SLOTS))
        );
        // SAFETY: as above; a count that is valid but larger than the buffer.
        unsafe { (*header).slots = 1024 };
        // SAFETY: as above.
        let got = unsafe { Ring::attach(base, len) }.err();
        assert_eq!(got, Some(WireError::TooShort));
    }

    #[test]
    fn corrupt_positions_never_index_out_of_the_ring() {
        let mut buf = buffer(8);
        let ring = ring(&mut buf, 8);
        let h = ring.header();
        for (head, tail) in [
            (u64::MAX, 0),
            (0, u64::MAX),
            (u64::MAX, u64::MAX - 1),
            (1 << 62, 3),
        ] {
            h.head.0.store(head, Ordering::Relaxed);
            h.tail.0.store(tail, Ordering::Relaxed);
            let _ = ring.pop();
            let _ = ring.push(&rec(1));
            let _ = ring.reserve(u64::MAX);
            let _ = ring.skip_hole();
            assert!(ring.capacity() == 8);
        }
        h.head.0.store(1 << 62, Ordering::Relaxed);
        h.tail.0.store(0, Ordering::Relaxed);
        assert!(
            ring.backlog() > ring.capacity(),
            "corruption is visible to the reader"
        );
    }

    #[test]
    fn hole_left_by_a_dead_writer_is_skipped() {
        let mut buf = buffer(8);
        let ring = ring(&mut buf, 8);
        ring.header().head.0.store(1, Ordering::Relaxed); // reserved, never published
        assert!(ring.pop().is_none());
        assert!(ring.skip_hole());
        assert!(!ring.skip_hole());
        assert_eq!(ring.dropped(), 1);
    }

    #[test]
    fn concurrent_writers_lose_nothing_that_fits() {
        let mut buf = buffer(1024);
        let ring = ring(&mut buf, 1024);
        let mut seen = vec![0u32; 4];
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for n in 0..5000u64 {
                        while !ring.push(&rec(t << 32 | n)) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut got = 0;
            let mut last = [None::<u64>; 4];
            while got < 20000 {
                if let Some(r) = ring.pop() {
                    let (t, n) = ((r.a >> 32) as usize, r.a & 0xffff_ffff);
                    assert!(last[t].is_none_or(|l| n == l + 1), "per-writer order kept");
                    last[t] = Some(n);
                    seen[t] += 1;
                    got += 1;
                }
            }
        });
        assert_eq!(seen, vec![5000; 4]);
    }

    #[test]
    fn groups_are_contiguous_and_all_or_nothing() {
        let mut buf = buffer(8);
        let ring = ring(&mut buf, 8);
        let g = ring.reserve(3).unwrap();
        assert!(ring.push(&rec(100)));
        assert!(ring.pop().is_none(), "group not published yet");
        for i in 0..3 {
            g.set(i, &rec(i));
        }
        let got: Vec<u64> = core::iter::from_fn(|| ring.pop()).map(|r| r.a).collect();
        assert_eq!(got, vec![0, 1, 2, 100]);
        assert!(ring.reserve(9).is_none());
        assert_eq!(ring.dropped(), 9);
    }

    #[test]
    fn heap_counters_track_current_and_peak() {
        let c = HeapCounters::new();
        c.add(100);
        c.add(50);
        c.sub(120);
        c.add(10);
        assert_eq!(c.current.load(Ordering::Relaxed), 40);
        assert_eq!(c.peak.load(Ordering::Relaxed), 150);
        assert_eq!(c.total.load(Ordering::Relaxed), 160);
    }
}
