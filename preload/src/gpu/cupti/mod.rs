//! The GPU's own account of the kernels a process runs: NVIDIA's CUPTI activity API, set up at
//! the process's first kernel launch (so a process that never launches one never loads it),
//! from the CUPTI library the process already has loaded or that ships beside its CUDA runtime.
//! CUPTI hands completed buffers of activity records to `buffers::completed`, which sends each
//! kernel's device time, the pairing of our sampled launches with CUPTI's ids of their calls,
//! and kernel names, to the collector; the join is the collector's. The program keeps CUPTI
//! when it wants it: registering its own buffer callbacks (a profiler of its own) makes us step
//! aside first. See docs/design/gpu-kernel-time.md.
//!
//! The set-up runs once, in the first launch's CUDA call (which itself allocates and locks;
//! never a signal handler or an allocation hook), with the thread marked busy so that what
//! CUPTI allocates is not the program's. The callbacks run in CUPTI's threads or in a CUDA
//! call of the program's, outside any signal handler; they keep errno (`buffers.rs`). A
//! program's own profiler takes CUPTI from us (`handover.rs`).

use core::ffi::{c_int, c_void, CStr};
use core::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use mlprof_wire::{gpu_trace, Record};

use super::dl;
use crate::{channel, clock, local};

mod buffers;
mod handover;

pub use handover::by_exact_name;

/// Not looked for yet.
const UNTRIED: u8 = 0;
/// One thread is setting it up.
const SETTING_UP: u8 = 1;
/// Recording.
const ON: u8 = 2;
/// Not recording (no library, refused, the program's, or the process is ending).
const OFF: u8 = 3;

pub(super) static STATE: AtomicU8 = AtomicU8::new(UNTRIED);
/// `CLOCK_MONOTONIC` less CUPTI's clock (ns), measured at set-up.
pub(super) static OFFSET_NS: AtomicI64 = AtomicI64::new(0);
/// The next id pushed around a sampled launch (never 0).
static NEXT_EXTERNAL: AtomicU64 = AtomicU64::new(1);

/// CUPTI's activity kinds we enable.
const KIND_DRIVER: c_int = 4;
const KIND_RUNTIME: c_int = 5;
const KIND_CONCURRENT_KERNEL: c_int = 10;
const KIND_EXTERNAL_CORRELATION: c_int = 39;
/// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2`: PyTorch's Kineto uses the first two.
pub(super) const EXTERNAL_KIND: c_int = 5;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
const FLUSH_FORCED: u32 = 1;

/// CUPTI's functions we call, in [`NAMES`] order.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(super) enum Api {
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

pub(super) fn api(f: Api) -> Option<usize> {
    match API.get(f as usize).map(|a| a.load(Ordering::Acquire)) {
        None | Some(0) => None,
        a => a,
    }
}

pub(super) type Request = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
pub(super) type Complete = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);

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
    local::with(|l| {
        let _held = l.hold();
        let state = set_up();
        STATE.store(state, Ordering::SeqCst);
        // The program may have registered its own just before we stored ON (its hand-over
        // found us still setting up): it keeps CUPTI.
        if state == ON
            && handover::PROGRAM_REGISTERED.load(Ordering::SeqCst)
            && STATE
                .compare_exchange(ON, OFF, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            handover::give_back_if_taken();
            trace(gpu_trace::PROGRAM_OWNS, 0);
        }
    });
}

/// Whether kernels are being recorded (launch ids are worth pushing).
#[inline]
pub fn on() -> bool {
    STATE.load(Ordering::Acquire) == ON
}

/// Push a new id around a sampled launch; returns it (0 when not recording). The program's
/// errno is kept, and what CUPTI allocates for its stack is not the program's.
pub fn push() -> u64 {
    let Some(f) = api(Api::Push).filter(|_| on()) else {
        return 0;
    };
    let id = NEXT_EXTERNAL.fetch_add(1, Ordering::Relaxed);
    type F = unsafe extern "C" fn(c_int, u64) -> c_int;
    let _errno = crate::errno::Saved::new();
    let r = local::with(|l| {
        let _held = l.hold();
        // SAFETY: CUPTI's `cuptiActivityPushExternalCorrelationId(kind, id)`.
        unsafe { core::mem::transmute::<usize, F>(f)(EXTERNAL_KIND, id) }
    });
    if r == 0 {
        id
    } else {
        0
    }
}

/// Pop the id [`push`] pushed (after the launch: the errno it left is kept).
pub fn pop() {
    let Some(f) = api(Api::Pop) else { return };
    type F = unsafe extern "C" fn(c_int, *mut u64) -> c_int;
    let mut last = 0u64;
    let _errno = crate::errno::Saved::new();
    local::with(|l| {
        let _held = l.hold();
        // SAFETY: CUPTI's `cuptiActivityPopExternalCorrelationId(kind, &last)`.
        unsafe { core::mem::transmute::<usize, F>(f)(EXTERNAL_KIND, &mut last) };
    });
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
        stop();
    });
}

/// Never set CUPTI up: the user asked for no GPU time (load time).
pub fn forget() {
    STATE.store(OFF, Ordering::Release);
}

/// A forked child: a parent that had looked for CUPTI leaves nothing usable (no CUDA context
/// crosses a fork); one that had not lets the child look for itself at its first launch.
pub fn forget_in_child() {
    if STATE.load(Ordering::Acquire) != UNTRIED {
        STATE.store(OFF, Ordering::Release);
    }
}

/// Every buffer handed back, complete or not (to the callbacks registered now).
fn flush() {
    if let Some(f) = api(Api::FlushAll) {
        type F = unsafe extern "C" fn(u32) -> c_int;
        // SAFETY: CUPTI's `cuptiActivityFlushAll(flag)`.
        unsafe { core::mem::transmute::<usize, F>(f)(FLUSH_FORCED) };
    }
}

/// Stop recording: our kinds off first, so that nothing new is written for us, then every
/// buffer handed back, complete or not (they come to our callback, registered still).
fn stop() {
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
    flush();
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
    if handover::PROGRAM_REGISTERED.load(Ordering::Acquire) {
        trace(gpu_trace::PROGRAM_OWNS, 0);
        return OFF;
    }
    measure_offset();
    let r = handover::register(buffers::requested, buffers::completed);
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
    // The program may have registered its own while ours was being made: it keeps CUPTI.
    if handover::give_back_if_taken() {
        trace(gpu_trace::PROGRAM_OWNS, 0);
        return OFF;
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
pub(super) fn trace(state: u8, detail: u64) {
    channel::send(&Record::gpu_trace(
        clock::tid(),
        clock::monotonic_ns(),
        state,
        detail,
    ));
}
