//! CUPTI's activity buffers: handed out by [`requested`], read back by [`completed`], which
//! sends each kernel's device time, the pairing of our sampled launches with CUPTI's ids of
//! their calls, and kernel names (once each) to the collector. Both run in CUPTI's threads or,
//! with per-thread buffers (CUDA 13), in a CUDA call of the program's, possibly at once on
//! several threads; never in a signal handler. They keep errno, and mark the thread busy so
//! that nothing they do is taken for the program's.
//!
//! Every buffer we hand out is in [`OURS`]: only those are read and given back by us; a buffer
//! of the program's that reaches our callback (in the instant its callbacks replace ours) goes
//! to the program's own callback. Buffers come from the real `malloc` (not counted as the
//! program's heap), so that one CUPTI hands to the program's callback can be freed by it.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use mlprof_wire::{gpu_trace, GpuCorrelation, GpuKernel, Record, DATA_BYTES, MAX_KERNEL_NAME};

use super::{api, trace, Api, OFFSET_NS};
use crate::{channel, clock, local};

/// Bytes of each activity buffer handed to CUPTI.
const BUFFER_BYTES: usize = 1 << 20;
/// Activity kinds read back.
const KIND_KERNEL: c_int = 3;
const KIND_CONCURRENT_KERNEL: c_int = 10;
const KIND_EXTERNAL_CORRELATION: c_int = 39;
/// Records CUPTI said it dropped, in all.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The buffers we handed out and CUPTI has not handed back (0: a free slot; [`TAKEN`]: one
/// being filled). Past it, CUPTI is given no buffer (it counts what it drops).
const SLOTS: usize = 1024;
static OURS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// A slot reserved while its buffer is allocated (no aligned address is 1).
const TAKEN: usize = 1;

/// CUPTI asks for a buffer.
pub unsafe extern "C" fn requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let _errno = crate::errno::Saved::new();
    let given = local::with(|l| {
        let _held = l.hold();
        give()
    });
    // SAFETY: CUPTI's out-pointers, valid for the call.
    unsafe {
        *buffer = given.map_or(core::ptr::null_mut(), |p| p as *mut u8);
        *size = if given.is_some() { BUFFER_BYTES } else { 0 };
        *max_records = 0;
    }
}

/// A buffer from the real `malloc`, recorded in [`OURS`] (a slot reserved first, so that two
/// threads asking at once both get one).
fn give() -> Option<usize> {
    let slot = OURS.iter().find(|s| {
        s.compare_exchange(0, TAKEN, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })?;
    let address = crate::real::malloc(BUFFER_BYTES) as usize;
    if address == 0 {
        slot.store(0, Ordering::Release);
        return None;
    }
    slot.store(address, Ordering::Release);
    Some(address)
}

/// CUPTI hands a buffer back: send what it holds, then free it. A buffer that is not ours goes
/// to the program's own callback (it registered while ours were in place).
pub unsafe extern "C" fn completed(
    context: *mut c_void,
    stream: u32,
    buffer: *mut u8,
    size: usize,
    valid: usize,
) {
    let address = buffer as usize;
    let slot = OURS
        .iter()
        .find(|s| address > TAKEN && s.load(Ordering::Acquire) == address);
    let Some(slot) = slot else {
        if address != 0 {
            // SAFETY: the program's buffer, handed to the program's callback with CUPTI's
            // arguments as they came.
            unsafe { super::handover::to_program(context, stream, buffer, size, valid) };
        }
        return;
    };
    let _errno = crate::errno::Saved::new();
    local::with(|l| {
        let _held = l.hold();
        // SAFETY: our buffer, `valid` bytes of it written by CUPTI.
        unsafe { read_buffer(buffer, valid.min(BUFFER_BYTES)) };
        count_dropped(context, stream);
    });
    // Released by whoever empties the slot from this address: never twice.
    if slot
        .compare_exchange(address, 0, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        // SAFETY: the block `give` took from the real `malloc`; CUPTI is done with it.
        unsafe { crate::real::free(address as *mut c_void) };
    }
}

/// Most time one buffer may wait, in all, for room in the channel (then records are dropped,
/// and counted, as any writer's).
const MAX_WAIT_NS: u64 = 2_000_000_000;
/// A reader that has not taken a record for this long is not draining: no wait for it.
const STALL_NS: u64 = 100_000_000;
/// The reader's position when it was last seen not draining (0: not stalled).
static STALLED_AT: AtomicU64 = AtomicU64::new(0);

/// A buffer holds thousands of records, far more than the program writes meanwhile: before
/// each, wait (1 ms at a time, up to [`MAX_WAIT_NS`] for the buffer, `waited` so far) until the
/// channel is at most three quarters full, so that a buffer never crowds out the program's own
/// samples nor overflows the channel while the collector drains it. No wait once the collector
/// is gone, nor while its reader stands still (a channel it gave up on, a collector killed):
/// from the moment the reader has not moved for [`STALL_NS`] until it moves again.
fn room(n: u64, waited: &mut u64) {
    let Some(ring) = channel::ring() else { return };
    let reader = || ring.header().tail.0.load(Ordering::Acquire).max(1);
    let full = || ring.backlog().saturating_add(n) > ring.capacity() / 4 * 3;
    if !full() || channel::collector_gone() {
        return;
    }
    match STALLED_AT.load(Ordering::Relaxed) {
        0 => {}
        at if at == reader() => return,
        _ => STALLED_AT.store(0, Ordering::Relaxed),
    }
    let (mut last, mut still) = (reader(), 0u64);
    while *waited < MAX_WAIT_NS && full() && !channel::collector_gone() {
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: the raw system call (not our timed `nanosleep` hook: this wait is ours); a
        // valid timespec.
        unsafe {
            libc::syscall(
                libc::SYS_nanosleep,
                &pause as *const libc::timespec,
                core::ptr::null_mut::<libc::timespec>(),
            )
        };
        *waited += 1_000_000;
        let now = reader();
        if now != last {
            (last, still) = (now, 0);
        } else {
            still += 1_000_000;
            if still >= STALL_NS {
                STALLED_AT.store(now, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Send the kernels and correlations of a completed buffer.
///
/// # Safety
/// `buffer` holds `valid` bytes of CUPTI's records.
unsafe fn read_buffer(buffer: *mut u8, valid: usize) {
    let mut waited = 0u64;
    let Some(next) = api(Api::GetNextRecord) else {
        return;
    };
    type F = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> c_int;
    // SAFETY: CUPTI's `cuptiActivityGetNextRecord`.
    let next = unsafe { core::mem::transmute::<usize, F>(next) };
    let mut record: *mut u8 = core::ptr::null_mut();
    // SAFETY: CUPTI walks its own records in the buffer; each it returns is a whole record
    // whose layout starts with its kind (the kernel record's first 112 bytes are the same in
    // every version from 4 on; the external correlation record is 24 bytes).
    while unsafe { next(buffer, valid, &mut record) } == 0 && !record.is_null() {
        // SAFETY: offsets inside the record of the kind read first (the kind at 0 is in
        // every record; the others only read for kinds that have them).
        let word = |at: usize| unsafe { (record.add(at) as *const u64).read_unaligned() };
        // SAFETY: as above.
        let half = |at: usize| unsafe { (record.add(at) as *const u32).read_unaligned() };
        match half(0) as c_int {
            KIND_CONCURRENT_KERNEL | KIND_KERNEL => {
                let (start, end) = (word(16), word(24));
                if start == 0 || end < start {
                    continue; // not timed (still running when forced out)
                }
                let offset = OFFSET_NS.load(Ordering::Relaxed);
                let name = word(104);
                let kernel = GpuKernel {
                    start_ns: start.saturating_add_signed(offset),
                    end_ns: end.saturating_add_signed(offset),
                    device: half(40),
                    stream: half(48),
                    correlation: half(92),
                    name,
                };
                room(2 + (MAX_KERNEL_NAME / DATA_BYTES) as u64, &mut waited);
                if name != 0 && names::first(name) {
                    // SAFETY: CUPTI's NUL-terminated kernel name, kept as long as the kernel.
                    let text = unsafe { CStr::from_ptr(name as *const c_char) };
                    if !send_name(name, text) {
                        names::forget(name); // no room now: sent with a later kernel
                    }
                }
                channel::send(&Record::gpu_kernel(
                    clock::tid(),
                    clock::monotonic_ns(),
                    kernel,
                ));
            }
            KIND_EXTERNAL_CORRELATION if half(4) as c_int == super::EXTERNAL_KIND => {
                room(1, &mut waited);
                let c = GpuCorrelation {
                    external: word(8),
                    correlation: half(16),
                };
                channel::send(&Record::gpu_correlation(
                    clock::tid(),
                    clock::monotonic_ns(),
                    c,
                ));
            }
            _ => {}
        }
    }
}

/// A kernel's name, cut at [`MAX_KERNEL_NAME`] bytes, in one group of records; `false` when
/// the channel had no room for it.
fn send_name(key: u64, name: &CStr) -> bool {
    let Some(ring) = channel::ring() else {
        return false;
    };
    let bytes = name.to_bytes();
    let bytes = bytes.get(..MAX_KERNEL_NAME).unwrap_or(bytes);
    let chunks = bytes.len().div_ceil(DATA_BYTES) as u64;
    let Some(group) = ring.reserve(1 + chunks) else {
        return false;
    };
    let head = Record::gpu_kernel_name(clock::tid(), clock::monotonic_ns(), key, bytes.len());
    group.set(0, &head);
    for (i, chunk) in bytes.chunks(DATA_BYTES).enumerate() {
        let mut data = [0u8; DATA_BYTES];
        for (to, from) in data.iter_mut().zip(chunk) {
            *to = *from;
        }
        group.set(1 + i as u64, &Record::data(&data));
    }
    true
}

/// Records CUPTI dropped for want of buffers, told as a running total.
fn count_dropped(context: *mut c_void, stream: u32) {
    let Some(f) = api(Api::GetNumDroppedRecords) else {
        return;
    };
    type F = unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> c_int;
    let mut dropped = 0usize;
    // SAFETY: CUPTI's `cuptiActivityGetNumDroppedRecords(context, stream, &dropped)`.
    let r = unsafe { core::mem::transmute::<usize, F>(f)(context, stream, &mut dropped) };
    if r == 0 && dropped > 0 {
        let total = DROPPED.fetch_add(dropped as u64, Ordering::Relaxed) + dropped as u64;
        trace(gpu_trace::DROPPED, total);
    }
}

/// Kernel names already sent, by the address CUPTI keeps each at (a fixed table; a name that
/// finds no room in it is sent with every kernel of it, and the collector keeps the first).
mod names {
    use crate::gpu::seen::Seen;

    static SENT: Seen<4096> = Seen::new();

    /// Whether `key` is to be sent now (new, or no room to remember it).
    pub fn first(key: u64) -> bool {
        SENT.check(key) != Some(false)
    }

    /// `key` could not be sent after all: the next kernel of that name tries again.
    pub fn forget(key: u64) {
        SENT.forget(key)
    }
}
