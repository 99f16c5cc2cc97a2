//! The GPU's own account of the kernels a process runs: NVIDIA's CUPTI activity API, set up at
//! the process's first kernel launch (so a process that never launches one never loads it),
//! from the CUPTI library the process already has loaded or that ships beside its CUDA runtime.
//! CUPTI hands completed buffers of activity records to [`completed`], which sends each
//! kernel's device time, the pairing of our sampled launches with CUPTI's ids of their calls,
//! and kernel names, to the collector; the join is the collector's. The program keeps CUPTI
//! when it wants it: registering its own buffer callbacks (a profiler of its own) makes us step
//! aside first. See docs/design/gpu-kernel-time.md.
//!
//! The set-up runs once, in the first launch's CUDA call (which itself allocates and locks;
//! never a signal handler or an allocation hook), with the thread marked busy so that what
//! CUPTI allocates is not the program's. The callbacks run in CUPTI's threads or in a CUDA
//! call of the program's, outside any signal handler; they keep errno and allocate nothing
//! themselves (buffers are mapped with the raw system call).

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use mlprof_wire::{gpu_trace, GpuCorrelation, GpuKernel, Record, DATA_BYTES, MAX_KERNEL_NAME};

use super::dl;
use crate::{channel, clock, local};

/// Not looked for yet.
const UNTRIED: u8 = 0;
/// One thread is setting it up.
const SETTING_UP: u8 = 1;
/// Recording.
const ON: u8 = 2;
/// Not recording (no library, refused, the program's, or the process is ending).
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNTRIED);
/// `CLOCK_MONOTONIC` less CUPTI's clock (ns), measured at set-up.
static OFFSET_NS: AtomicI64 = AtomicI64::new(0);
/// The next id pushed around a sampled launch (never 0).
static NEXT_EXTERNAL: AtomicU64 = AtomicU64::new(1);
/// Records CUPTI said it dropped, in all.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The program registered buffer callbacks of its own.
static PROGRAM_REGISTERED: AtomicBool = AtomicBool::new(false);

/// CUPTI's activity kinds we enable.
const KIND_DRIVER: c_int = 4;
const KIND_RUNTIME: c_int = 5;
const KIND_CONCURRENT_KERNEL: c_int = 10;
const KIND_KERNEL: c_int = 3;
const KIND_EXTERNAL_CORRELATION: c_int = 39;
/// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2`: PyTorch's Kineto uses the first two.
const EXTERNAL_KIND: c_int = 5;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
const FLUSH_FORCED: u32 = 1;
/// Bytes of each activity buffer handed to CUPTI.
const BUFFER_BYTES: usize = 1 << 20;

/// CUPTI's functions we call, in [`NAMES`] order.
#[derive(Clone, Copy)]
#[repr(usize)]
enum Api {
    GetVersion,
    GetTimestamp,
    RegisterCallbacks,
    Enable,
    Disable,
    FlushAll,
    GetNextRecord,
    GetNumDroppedRecords,
    Push,
    Pop,
}

const NAMES: [&CStr; 10] = [
    c"cuptiGetVersion",
    c"cuptiGetTimestamp",
    c"cuptiActivityRegisterCallbacks",
    c"cuptiActivityEnable",
    c"cuptiActivityDisable",
    c"cuptiActivityFlushAll",
    c"cuptiActivityGetNextRecord",
    c"cuptiActivityGetNumDroppedRecords",
    c"cuptiActivityPushExternalCorrelationId",
    c"cuptiActivityPopExternalCorrelationId",
];

static API: [AtomicUsize; 10] = [const { AtomicUsize::new(0) }; 10];

fn api(f: Api) -> Option<usize> {
    match API.get(f as usize).map(|a| a.load(Ordering::Acquire)) {
        None | Some(0) => None,
        a => a,
    }
}

type Request = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type Complete = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);

/// The first kernel launch of the process: set CUPTI up, once. Later calls cost one load.
#[inline]
pub fn ensure() {
    if STATE.load(Ordering::Relaxed) != UNTRIED {
        return;
    }
    if STATE
        .compare_exchange(UNTRIED, SETTING_UP, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let _errno = crate::errno::Saved::new();
    let state = local::with(|l| {
        let _held = l.hold();
        set_up()
    });
    STATE.store(state, Ordering::Release);
}

/// Whether kernels are being recorded (launch ids are worth pushing).
#[inline]
pub fn on() -> bool {
    STATE.load(Ordering::Acquire) == ON
}

/// Push a new id around a sampled launch; returns it (0 when not recording).
pub fn push() -> u64 {
    let Some(f) = api(Api::Push).filter(|_| on()) else {
        return 0;
    };
    let id = NEXT_EXTERNAL.fetch_add(1, Ordering::Relaxed);
    type F = unsafe extern "C" fn(c_int, u64) -> c_int;
    // SAFETY: CUPTI's `cuptiActivityPushExternalCorrelationId(kind, id)`.
    let r = unsafe { core::mem::transmute::<usize, F>(f)(EXTERNAL_KIND, id) };
    if r == 0 {
        id
    } else {
        0
    }
}

/// Pop the id [`push`] pushed.
pub fn pop() {
    let Some(f) = api(Api::Pop) else { return };
    type F = unsafe extern "C" fn(c_int, *mut u64) -> c_int;
    let mut last = 0u64;
    // SAFETY: CUPTI's `cuptiActivityPopExternalCorrelationId(kind, &last)`.
    unsafe { core::mem::transmute::<usize, F>(f)(EXTERNAL_KIND, &mut last) };
}

/// The process is ending (an `atexit` handler registered at set-up, so it runs before the
/// CUDA runtime's own exit handlers): hand every buffer over, complete or not, and stop.
extern "C" fn at_exit() {
    if STATE.swap(OFF, Ordering::AcqRel) != ON {
        return;
    }
    let _errno = crate::errno::Saved::new();
    local::with(|l| {
        let _held = l.hold();
        flush_and_disable();
    });
}

/// Never set CUPTI up: in a forked child (it inherits no CUDA context, and nothing of the
/// parent's CUPTI is used there), or when the user asked for no GPU time (load time).
pub fn forget() {
    STATE.store(OFF, Ordering::Release);
}

fn flush_and_disable() {
    if let Some(f) = api(Api::FlushAll) {
        type F = unsafe extern "C" fn(u32) -> c_int;
        // SAFETY: CUPTI's `cuptiActivityFlushAll(flag)`; the buffers come to `completed`.
        unsafe { core::mem::transmute::<usize, F>(f)(FLUSH_FORCED) };
    }
    if let Some(f) = api(Api::Disable) {
        type F = unsafe extern "C" fn(c_int) -> c_int;
        for kind in [
            KIND_CONCURRENT_KERNEL,
            KIND_RUNTIME,
            KIND_DRIVER,
            KIND_EXTERNAL_CORRELATION,
        ] {
            // SAFETY: CUPTI's `cuptiActivityDisable(kind)`.
            unsafe { core::mem::transmute::<usize, F>(f)(kind) };
        }
    }
}

/// Find CUPTI, take its functions, register our buffers and enable the kinds; tell the
/// collector the outcome. Returns the new state.
fn set_up() -> u8 {
    let Some(handle) = super::locate::cupti() else {
        trace(gpu_trace::NO_CUPTI, 0);
        return OFF;
    };
    for (slot, name) in API.iter().zip(NAMES) {
        // SAFETY: a handle from `dlopen` and a C string.
        let a = unsafe { dl::sym(handle, name) };
        if a != 0 && !super::real::ours(a) {
            slot.store(a, Ordering::Release);
        }
    }
    let required = [
        Api::GetTimestamp,
        Api::RegisterCallbacks,
        Api::Enable,
        Api::FlushAll,
        Api::GetNextRecord,
        Api::Push,
        Api::Pop,
    ];
    if required.iter().any(|&f| api(f).is_none()) {
        trace(gpu_trace::FAILED, 0);
        return OFF;
    }
    if PROGRAM_REGISTERED.load(Ordering::Acquire) {
        trace(gpu_trace::PROGRAM_OWNS, 0);
        return OFF;
    }
    measure_offset();
    let register = api(Api::RegisterCallbacks).unwrap_or(0);
    type Register = unsafe extern "C" fn(Request, Complete) -> c_int;
    // SAFETY: CUPTI's `cuptiActivityRegisterCallbacks(request, complete)`, with callbacks of
    // its typedefs' signatures.
    let r = unsafe { core::mem::transmute::<usize, Register>(register)(requested, completed) };
    if r != 0 {
        trace(gpu_trace::FAILED, r as u64);
        return OFF;
    }
    let enable = api(Api::Enable).unwrap_or(0);
    type Enable = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: CUPTI's `cuptiActivityEnable(kind)`.
    let enable = |kind| unsafe { core::mem::transmute::<usize, Enable>(enable)(kind) };
    let r = enable(KIND_CONCURRENT_KERNEL);
    if r != 0 {
        trace(gpu_trace::FAILED, r as u64);
        return OFF;
    }
    // The pairing of sampled launches needs the API records (CUPTI writes an external
    // correlation record before each API record made while an id is pushed). Without them
    // kernels are still summed, only not tied to lines.
    for kind in [KIND_RUNTIME, KIND_DRIVER, KIND_EXTERNAL_CORRELATION] {
        enable(kind);
    }
    // SAFETY: registering a handler with no preconditions; registered after the CUDA runtime
    // (initialised before any launch) registered its own, so it runs before them.
    unsafe { libc::atexit(at_exit) };
    trace(gpu_trace::ON, version());
    ON
}

/// CUPTI's API version (0 if it does not say).
fn version() -> u64 {
    let Some(f) = api(Api::GetVersion) else {
        return 0;
    };
    type F = unsafe extern "C" fn(*mut u32) -> c_int;
    let mut v = 0u32;
    // SAFETY: CUPTI's `cuptiGetVersion(&version)`.
    unsafe { core::mem::transmute::<usize, F>(f)(&mut v) };
    v as u64
}

/// CUPTI's timestamps are `CLOCK_REALTIME` by default: the offset to the channel's clock,
/// read between two readings of ours.
fn measure_offset() {
    let Some(f) = api(Api::GetTimestamp) else {
        return;
    };
    type F = unsafe extern "C" fn(*mut u64) -> c_int;
    let before = clock::monotonic_ns();
    let mut theirs = 0u64;
    // SAFETY: CUPTI's `cuptiGetTimestamp(&ns)`.
    unsafe { core::mem::transmute::<usize, F>(f)(&mut theirs) };
    let after = clock::monotonic_ns();
    let ours = before / 2 + after / 2;
    OFFSET_NS.store(ours as i64 - theirs as i64, Ordering::Relaxed);
}

/// Tell the collector the trace's state.
fn trace(state: u8, detail: u64) {
    channel::send(&Record::gpu_trace(
        clock::tid(),
        clock::monotonic_ns(),
        state,
        detail,
    ));
}

/// CUPTI asks for a buffer: a fresh private mapping (8-byte aligned, as records need).
unsafe extern "C" fn requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _errno = crate::errno::Saved::new();
    // SAFETY: an anonymous private mapping through the raw system call (not our `mmap` hook:
    // the buffer is ours, not the program's).
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            BUFFER_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1i64,
            0usize,
        )
    };
    let ok = p > 0;
    // SAFETY: CUPTI's out-pointers, valid for the call.
    unsafe {
        *buffer = if ok {
            p as *mut u8
        } else {
            core::ptr::null_mut()
        };
        *size = if ok { BUFFER_BYTES } else { 0 };
        *max_records = 0;
    }
}

/// CUPTI hands a buffer back: send what it holds, then unmap it.
unsafe extern "C" fn completed(
    context: *mut c_void,
    stream: u32,
    buffer: *mut u8,
    size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    let _errno = crate::errno::Saved::new();
    local::with(|l| {
        let _held = l.hold();
        // SAFETY: the buffer `requested` mapped, `valid` bytes of it written by CUPTI.
        unsafe { read_buffer(buffer, valid) };
        count_dropped(context, stream);
    });
    // SAFETY: the mapping `requested` made (CUPTI is done with it); `size` is its length.
    unsafe { libc::syscall(libc::SYS_munmap, buffer as usize, size) };
}

/// Send the kernels and correlations of a completed buffer.
///
/// # Safety
/// `buffer` holds `valid` bytes of CUPTI's records.
unsafe fn read_buffer(buffer: *mut u8, valid: usize) {
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
                if name != 0 && names::first(name) {
                    // SAFETY: CUPTI's NUL-terminated kernel name, kept as long as the kernel.
                    send_name(name, unsafe { CStr::from_ptr(name as *const c_char) });
                }
                channel::send(&Record::gpu_kernel(
                    clock::tid(),
                    clock::monotonic_ns(),
                    kernel,
                ));
            }
            KIND_EXTERNAL_CORRELATION if half(4) as c_int == EXTERNAL_KIND => {
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

/// A kernel's name, once, cut at [`MAX_KERNEL_NAME`] bytes, in one group of records.
fn send_name(key: u64, name: &CStr) {
    let Some(ring) = channel::ring() else { return };
    let bytes = name.to_bytes();
    let bytes = bytes.get(..MAX_KERNEL_NAME).unwrap_or(bytes);
    let chunks = bytes.len().div_ceil(DATA_BYTES) as u64;
    let Some(group) = ring.reserve(1 + chunks) else {
        return;
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

/// `cuptiActivityRegisterCallbacks`, interposed: the program (a profiler of its own, such as
/// PyTorch's Kineto, linked against CUPTI) takes CUPTI's activity buffers. We hand ours over
/// and stop first, say so, and forward the call unchanged.
///
/// # Safety
/// CUPTI's contract.
#[cfg_attr(not(test), no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    request: Request,
    complete: Complete,
) -> c_int {
    PROGRAM_REGISTERED.store(true, Ordering::Release);
    let _errno = crate::errno::Saved::new();
    if STATE
        .compare_exchange(ON, OFF, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        local::with(|l| {
            let _held = l.hold();
            flush_and_disable();
        });
        trace(gpu_trace::PROGRAM_OWNS, 0);
    }
    drop(_errno);
    let real = api(Api::RegisterCallbacks).or_else(|| {
        // SAFETY: RTLD_NEXT looks past this library for the program's CUPTI.
        let a = unsafe { dl::sym(libc::RTLD_NEXT, c"cuptiActivityRegisterCallbacks") };
        (a != 0 && !super::real::ours(a)).then_some(a)
    });
    match real {
        // SAFETY: CUPTI's own function of this signature, forwarded as given.
        Some(f) => unsafe {
            core::mem::transmute::<usize, unsafe extern "C" fn(Request, Complete) -> c_int>(f)(
                request, complete,
            )
        },
        None => 999, // CUPTI_ERROR_UNKNOWN: there is no CUPTI to forward to
    }
}

/// Kernel names already sent, by CUPTI's address of the name (a fixed table: past it, a name
/// is sent again, which the collector ignores).
mod names {
    use core::sync::atomic::{AtomicU64, Ordering};

    const SLOTS: usize = 4096;
    static SEEN: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

    /// Whether `key` (non-zero) is seen for the first time (and now marked seen).
    pub fn first(key: u64) -> bool {
        let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % SLOTS;
        for i in 0..SLOTS {
            let Some(slot) = SEEN.get((start + i) % SLOTS) else {
                return true;
            };
            match slot.load(Ordering::Acquire) {
                k if k == key => return false,
                0 => match slot.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return true,
                    Err(k) if k == key => return false,
                    Err(_) => {}
                },
                _ => {}
            }
        }
        true
    }
}
