//! The program's own CUPTI: `cuptiActivityRegisterCallbacks`, interposed (exported, and handed
//! out by our `dlsym` for that exact function), so that a profiler of the program's own
//! (PyTorch's Kineto, onnxruntime's, XLA's, linked against CUPTI or looking it up) takes
//! CUPTI's activity buffers: we stop recording and hand ours back first, say so, and forward
//! the call unchanged. Its callbacks are kept, so that a set-up of ours racing with it can give
//! CUPTI back to them.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mlprof_wire::gpu_trace;

use super::{api, flush, stop, trace, Api, Complete, Request, OFF, ON, STATE};
use crate::gpu::dl;
use crate::gpu::real::ours;

/// The program registered buffer callbacks of its own.
pub(super) static PROGRAM_REGISTERED: AtomicBool = AtomicBool::new(false);
/// Its callbacks (0: none yet).
static PROGRAM_REQUEST: AtomicUsize = AtomicUsize::new(0);
static PROGRAM_COMPLETE: AtomicUsize = AtomicUsize::new(0);
/// CUPTI's own function, as our `dlsym` found it for the program (0: not looked up so).
static REAL: AtomicUsize = AtomicUsize::new(0);

/// The program looked `cuptiActivityRegisterCallbacks` up through a handle and got `found`:
/// our interposer instead, which forwards to it.
pub fn by_exact_name(name: &[u8], found: usize) -> Option<usize> {
    if name != b"cuptiActivityRegisterCallbacks" || found == 0 || ours(found) {
        return None;
    }
    REAL.store(found, Ordering::Release);
    Some(cuptiActivityRegisterCallbacks as *const () as usize)
}

/// CUPTI's `cuptiActivityRegisterCallbacks`: ours if set up, else as the program found it,
/// else the next definition, else the CUPTI already loaded (by soname).
fn real() -> Option<usize> {
    if let Some(a) = api(Api::RegisterCallbacks) {
        return Some(a);
    }
    match REAL.load(Ordering::Acquire) {
        0 => {}
        a => return Some(a),
    }
    let name = c"cuptiActivityRegisterCallbacks";
    // SAFETY: RTLD_NEXT looks past this library.
    let next = unsafe { dl::sym(libc::RTLD_NEXT, name) };
    if next != 0 && !ours(next) {
        return Some(next);
    }
    for soname in [c"libcupti.so.13", c"libcupti.so.12"] {
        // SAFETY: a C string; RTLD_NOLOAD only returns a handle to a library already loaded.
        let h = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if h.is_null() {
            continue;
        }
        // SAFETY: a handle from `dlopen` and a C string; the handle is given back at once.
        let a = unsafe {
            let a = dl::sym(h, name);
            libc::dlclose(h);
            a
        };
        if a != 0 && !ours(a) {
            return Some(a);
        }
    }
    None
}

/// Register `request` and `complete` with CUPTI's own function.
pub(super) fn register(request: Request, complete: Complete) -> c_int {
    match real() {
        // SAFETY: CUPTI's own function of this signature.
        Some(f) => unsafe {
            core::mem::transmute::<usize, unsafe extern "C" fn(Request, Complete) -> c_int>(f)(
                request, complete,
            )
        },
        None => 999, // CUPTI_ERROR_UNKNOWN: there is no CUPTI to forward to
    }
}

/// After our registration: if the program registered meanwhile (its call came while ours was
/// being made), our buffers come back to us, and CUPTI goes back to its callbacks (the kinds
/// it may have enabled meanwhile left on). Returns whether it did.
pub(super) fn give_back_if_taken() -> bool {
    if !PROGRAM_REGISTERED.load(Ordering::SeqCst) {
        return false;
    }
    flush();
    let (request, complete) = (
        PROGRAM_REQUEST.load(Ordering::Acquire),
        PROGRAM_COMPLETE.load(Ordering::Acquire),
    );
    if request != 0 && complete != 0 {
        // SAFETY: the program's own callbacks, stored from its call with these signatures.
        let (request, complete) = unsafe {
            (
                core::mem::transmute::<usize, Request>(request),
                core::mem::transmute::<usize, Complete>(complete),
            )
        };
        register(request, complete);
    }
    true
}

/// A buffer of the program's that CUPTI handed to our callback (it registered while ours were
/// in place): to the program's own callback, if it told us one; else left alone.
///
/// # Safety
/// CUPTI's arguments to a buffer-completed callback.
pub(super) unsafe fn to_program(
    context: *mut c_void,
    stream: u32,
    buffer: *mut u8,
    size: usize,
    valid: usize,
) {
    let complete = PROGRAM_COMPLETE.load(Ordering::Acquire);
    if complete == 0 || ours(complete) {
        return;
    }
    // SAFETY: the program's own callback, stored from its call with this signature.
    let complete = unsafe { core::mem::transmute::<usize, Complete>(complete) };
    // SAFETY: forwarded as CUPTI gave them.
    unsafe { complete(context, stream, buffer, size, valid) };
}

/// `cuptiActivityRegisterCallbacks`, interposed: the program takes CUPTI's activity buffers.
///
/// # Safety
/// CUPTI's contract.
#[cfg_attr(not(test), no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    request: Request,
    complete: Complete,
) -> c_int {
    let real = {
        let _errno = crate::errno::Saved::new();
        PROGRAM_REQUEST.store(request as usize, Ordering::Release);
        PROGRAM_COMPLETE.store(complete as usize, Ordering::Release);
        PROGRAM_REGISTERED.store(true, Ordering::SeqCst);
        if STATE
            .compare_exchange(ON, OFF, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            crate::local::with(|l| {
                let _held = l.hold();
                stop();
            });
            trace(gpu_trace::PROGRAM_OWNS, 0);
        }
        real()
    };
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
