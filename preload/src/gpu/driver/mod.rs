//! The CUDA driver API's allocation, copy, synchronisation and launch functions (`cu*`), for
//! programs that reach the driver rather than the runtime: PyTorch's expandable segments
//! (`cuMemCreate`), XLA, CuPy, Triton's launchers. Each function has two hooks, made by
//! [`driver_hooks!`] from one body: the exported one, which a program linked to `libcuda.so.1`
//! binds (and which `dlsym` and `cuGetProcAddress` hand out when the driver's answer is the
//! exported function itself), forwarding to the driver's exported function; and a second one
//! handed out where the driver answered with another address for the same function (an
//! internal entry, a per-thread-stream variant), forwarding to the first such address it was
//! handed for ([`hand_out`]; a later, different one is handed back unchanged, unseen). The
//! runtime's own calls of the driver pass through them too, nested: only the outermost call is
//! told ([`send::Call`]).

#![allow(non_snake_case)] // the driver's names

use core::ffi::c_int;
use core::sync::atomic::{AtomicUsize, Ordering};

use mlprof_wire::gpu::UNKNOWN_DEVICE;
use mlprof_wire::{gpu_copy, gpu_space};

use super::real::Slots;
use super::send;

/// What a hook returns when the driver does not define its function (a program that looked
/// the name up without loading CUDA): `CUDA_ERROR_UNKNOWN`.
const UNAVAILABLE: c_int = 999;
/// `CUDA_SUCCESS`.
const SUCCESS: c_int = 0;
/// `CUDA_ERROR_INVALID_VALUE`: what `cuPointerGetAttribute` answers for host memory CUDA
/// does not know (plain pageable memory).
const INVALID_VALUE: c_int = 1;

/// The driver's exported functions the hooks forward to, found on first use.
static DRIVER: Slots<COUNT> = Slots::new(b"libcuda.so", hooks::NAMES);
/// What each handed-out hook forwards to (0: none handed out yet).
static HANDED: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];
/// Driver functions the hooks ask, not interposed.
static ASK: Slots<2> = Slots::new(b"libcuda.so", [c"cuCtxGetDevice", c"cuPointerGetAttribute"]);

pub use hooks::Func;
use hooks::COUNT;

/// The driver function whose exported name is exactly `name` (`cuMemAlloc_v2`).
pub fn by_exact_name(name: &[u8]) -> Option<Func> {
    DRIVER.index(name).and_then(|i| hooks::ALL.get(i).copied())
}

/// The driver function `cuGetProcAddress` knows as `base` (`cuMemAlloc`), with the first CUDA
/// version (1000 x major + 10 x minor) at which it has our hook's signature.
pub fn by_base(base: &[u8]) -> Option<(Func, c_int)> {
    let i = hooks::BASES.iter().position(|b| *b == base)?;
    Some((*hooks::ALL.get(i)?, *hooks::SINCE.get(i)?))
}

/// The driver's exported `f`.
pub fn exported_real(f: Func) -> Option<usize> {
    DRIVER.address(f as usize)
}

/// Our exported hook of `f`.
pub fn exported_hook(f: Func) -> usize {
    hooks::exported(f)
}

/// What to hand a program asking for `f`, which the driver gave as `found`: our exported hook
/// when `found` is the exported function, else our second hook the first time (bound to
/// `found`) and for the same address again; any other address unchanged.
pub fn hand_out(f: Func, found: usize) -> usize {
    if exported_real(f) == Some(found) {
        return hooks::exported(f);
    }
    let Some(slot) = HANDED.get(f as usize) else {
        return found;
    };
    match slot.compare_exchange(0, found, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => hooks::handed(f),
        Err(bound) if bound == found => hooks::handed(f),
        Err(_) => found,
    }
}

/// The address a handed-out hook forwards to.
fn handed(f: Func) -> Option<usize> {
    match HANDED.get(f as usize)?.load(Ordering::Acquire) {
        0 => None,
        a => Some(a),
    }
}

/// The device of the calling thread's current context ([`UNKNOWN_DEVICE`] if none).
fn current_device() -> u32 {
    type GetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
    let Some(f) = ASK.address(0) else {
        return UNKNOWN_DEVICE;
    };
    let _errno = crate::errno::Saved::new();
    let mut device: c_int = -1;
    // SAFETY: the driver's `cuCtxGetDevice`, its documented signature; a valid out-pointer.
    match unsafe { core::mem::transmute::<usize, GetDevice>(f)(&mut device) } {
        SUCCESS if device >= 0 => device as u32,
        _ => UNKNOWN_DEVICE,
    }
}

/// Whether `p` is device (or managed) memory, as the driver describes it; `None` when it
/// cannot say. The driver keeps no error state a query could disturb.
fn on_device(p: u64) -> Option<bool> {
    type Attribute = unsafe extern "C" fn(*mut core::ffi::c_void, c_int, u64) -> c_int;
    const MEMORY_TYPE: c_int = 2; // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    let f = ASK.address(1)?;
    let _errno = crate::errno::Saved::new();
    let mut kind: u32 = 0;
    // SAFETY: the driver's `cuPointerGetAttribute`; the memory type is an unsigned int.
    let r = unsafe {
        core::mem::transmute::<usize, Attribute>(f)((&mut kind as *mut u32).cast(), MEMORY_TYPE, p)
    };
    match r {
        SUCCESS => Some(kind == 2 || kind == 4), // CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_UNIFIED
        INVALID_VALUE => Some(false),
        _ => None,
    }
}

/// The direction of a copy between unified addresses.
fn direction(dst: u64, src: u64) -> u8 {
    match (on_device(src), on_device(dst)) {
        (Some(false), Some(false)) => gpu_copy::HOST_TO_HOST,
        (Some(false), Some(true)) => gpu_copy::HOST_TO_DEVICE,
        (Some(true), Some(false)) => gpu_copy::DEVICE_TO_HOST,
        (Some(true), Some(true)) => gpu_copy::DEVICE_TO_DEVICE,
        _ => gpu_copy::UNKNOWN,
    }
}

/// What an allocation call returned: told (the address or handle it wrote, on the current
/// device unless pinned) when it succeeded and is the outermost CUDA call; returned unchanged.
///
/// # Safety
/// `out` is null or the caller's out-pointer, which the driver wrote if `r` is success.
unsafe fn allocated(r: c_int, call: &send::Call, out: *const u64, size: usize, space: u8) -> c_int {
    if r == SUCCESS && call.outermost() && !out.is_null() {
        // SAFETY: the caller's valid out-pointer (checked non-null), written by the driver.
        let addr = unsafe { out.read_unaligned() };
        let device = if space == gpu_space::PINNED {
            UNKNOWN_DEVICE
        } else {
            current_device()
        };
        send::alloc(addr as usize, size, space, device);
    }
    r
}

/// What a free returned: told when it succeeded and is the outermost call.
fn freed(r: c_int, call: &send::Call, addr: u64, space: u8) -> c_int {
    if r == SUCCESS && call.outermost() {
        send::free(addr as usize, space);
    }
    r
}

/// What a copy returned: told when it succeeded and is the outermost call.
fn copied(r: c_int, call: &send::Call, bytes: usize, direction: u8, synchronous: bool) -> c_int {
    if r == SUCCESS && call.outermost() {
        send::copy(bytes, direction, synchronous);
    }
    r
}

/// What a launch returned (`token` from `send::launch_begin`): a sampled launch is sent when
/// it succeeded.
fn launched(r: c_int, token: u64) -> c_int {
    send::launch_end(token, r == SUCCESS);
    r
}

/// Define the driver hooks: for each function, the exported hook `$name` and the handed-out
/// hook `$handed`, both running `$body` with `$f` the driver's function and `$call` this call;
/// and the tables of names, `cuGetProcAddress` names and first versions.
macro_rules! driver_hooks {
    ($(
        $(#[doc = $doc:literal])*
        fn $name:ident / $handed:ident [$func:ident, $base:literal, $since:literal]
            ($($arg:ident : $ty:ty),* $(,)?) |$f:ident, $call:ident| $body:block
    )*) => {
        /// The driver functions interposed.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Func {
            $($func,)*
        }

        /// Every [`Func`], in order.
        pub const ALL: &[Func] = &[$(Func::$func,)*];

        /// How many there are.
        pub const COUNT: usize = ALL.len();

        /// Each function's exported name, in [`Func`] order.
        pub const NAMES: [&core::ffi::CStr; COUNT] = [$(
            // SAFETY: an identifier (no NUL inside) with one NUL appended.
            unsafe { core::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) },
        )*];

        /// Each function's name as `cuGetProcAddress` takes it (no version suffix).
        pub const BASES: [&[u8]; COUNT] = [$($base.as_bytes(),)*];

        /// The first CUDA version at which each has the signature of its hook.
        pub const SINCE: [c_int; COUNT] = [$($since,)*];

        $(
            $(#[doc = $doc])*
            ///
            /// # Safety
            /// The driver's contract.
            #[cfg_attr(not(test), no_mangle)]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                type F = unsafe extern "C" fn($($ty),*) -> c_int;
                let $f: F = match super::exported_real(Func::$func) {
                    // SAFETY: the driver's exported function of this name, which has this
                    // signature.
                    Some(a) => unsafe { core::mem::transmute::<usize, F>(a) },
                    None => return super::UNAVAILABLE,
                };
                let $call = super::send::Call::begin();
                $body
            }

            /// The same hook, forwarding to the address the driver handed out for it.
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn $handed($($arg: $ty),*) -> c_int {
                type F = unsafe extern "C" fn($($ty),*) -> c_int;
                let $f: F = match super::handed(Func::$func) {
                    // SAFETY: what the driver handed out for this function, at a version
                    // where it has this signature (`super::hand_out`).
                    Some(a) => unsafe { core::mem::transmute::<usize, F>(a) },
                    None => return super::UNAVAILABLE,
                };
                let $call = super::send::Call::begin();
                $body
            }
        )*

        /// Our exported hook of `f`.
        pub fn exported(f: Func) -> usize {
            match f {
                $(Func::$func => $name as unsafe extern "C" fn($($ty),*) -> c_int as usize,)*
            }
        }

        /// Our handed-out hook of `f`.
        pub fn handed(f: Func) -> usize {
            match f {
                $(Func::$func => $handed as unsafe extern "C" fn($($ty),*) -> c_int as usize,)*
            }
        }
    };
}

// After the macro: its definition is in scope from here on.
mod hooks;
