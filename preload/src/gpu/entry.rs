//! The ways a program is handed a CUDA function instead of linking to it: the driver's
//! `cuGetProcAddress` (`_v2`), the runtime's `cudaGetDriverEntryPoint` (`ByVersion`), and
//! `dlsym` through a handle ([`super::dl`]). Where the answer is a function we interpose, the
//! program gets our hook of it: for the driver, only at a CUDA version whose signature the hook
//! has (from the function's first such version up to [`KNOWN_BEFORE`]); an address of our own
//! (the runtime asked our `cuGetProcAddress`) is never wrapped again.

#![allow(non_snake_case)] // the CUDA names

use core::ffi::{c_char, c_int, c_uint, c_void, CStr};

use super::real::{self, Func, Slots};
use super::{driver, hooks};

/// The first CUDA version whose driver signatures the hooks do not know: a program built
/// against it is handed the driver's own functions (unseen, unchanged).
const KNOWN_BEFORE: c_int = 14000;

/// `CUDA_ERROR_UNKNOWN` / `cudaErrorUnknown`: no CUDA library defines the function.
const UNAVAILABLE: c_int = 999;

/// The driver's entry-point functions, found on first use.
static ENTRY: Slots<2> = Slots::new(b"libcuda.so", [c"cuGetProcAddress", c"cuGetProcAddress_v2"]);

/// Our exported hook of the runtime function `f`, if it has one.
fn runtime_hook(f: Func) -> Option<usize> {
    type Hook = usize;
    let hook: Hook = match f {
        Func::Malloc => hooks::cudaMalloc as *const () as usize,
        Func::Free => hooks::cudaFree as *const () as usize,
        Func::MallocAsync => hooks::cudaMallocAsync as *const () as usize,
        Func::FreeAsync => hooks::cudaFreeAsync as *const () as usize,
        Func::MallocManaged => hooks::cudaMallocManaged as *const () as usize,
        Func::MallocHost => hooks::cudaMallocHost as *const () as usize,
        Func::HostAlloc => hooks::cudaHostAlloc as *const () as usize,
        Func::FreeHost => hooks::cudaFreeHost as *const () as usize,
        Func::Memcpy => hooks::cudaMemcpy as *const () as usize,
        Func::MemcpyAsync => hooks::cudaMemcpyAsync as *const () as usize,
        Func::Memcpy2D => hooks::cudaMemcpy2D as *const () as usize,
        Func::Memcpy2DAsync => hooks::cudaMemcpy2DAsync as *const () as usize,
        Func::MemcpyPeer => hooks::cudaMemcpyPeer as *const () as usize,
        Func::MemcpyPeerAsync => hooks::cudaMemcpyPeerAsync as *const () as usize,
        Func::StreamSynchronize => hooks::cudaStreamSynchronize as *const () as usize,
        Func::DeviceSynchronize => hooks::cudaDeviceSynchronize as *const () as usize,
        Func::EventSynchronize => hooks::cudaEventSynchronize as *const () as usize,
        Func::LaunchKernel => hooks::cudaLaunchKernel as *const () as usize,
        Func::LaunchKernelExC => hooks::cudaLaunchKernelExC as *const () as usize,
        Func::GraphLaunch => hooks::cudaGraphLaunch as *const () as usize,
        Func::GetDriverEntryPoint => cudaGetDriverEntryPoint as *const () as usize,
        Func::GetDriverEntryPointByVersion => {
            cudaGetDriverEntryPointByVersion as *const () as usize
        }
        Func::GetDevice
        | Func::PointerGetAttributes
        | Func::PeekAtLastError
        | Func::GetLastError
        | Func::RuntimeGetVersion => return None,
    };
    Some(hook)
}

/// `dlsym(handle, name)` found `found`: our hook when `found` is exactly the CUDA function
/// (driver or runtime) of that name that our hook forwards to; else `found`.
pub fn by_exact_name(name: &[u8], found: usize) -> usize {
    if let Some(ours) = super::cupti::by_exact_name(name, found) {
        return ours;
    }
    if let Some(f) = driver::by_exact_name(name) {
        if driver::exported_real(f) == Some(found) {
            return driver::exported_hook(f);
        }
    } else if let Some(i) = ENTRY.index(name) {
        if ENTRY.address(i) == Some(found) {
            return match i {
                0 => cuGetProcAddress as *const () as usize,
                _ => cuGetProcAddress_v2 as *const () as usize,
            };
        }
    } else if let Some(f) = real::by_name(name) {
        if let Some(hook) = runtime_hook(f) {
            if real::address(f) == Some(found) {
                return hook;
            }
        }
    }
    found
}

/// After an entry-point query that returned `r`: if it succeeded and wrote a driver function
/// we interpose, at a version we know, put our hook in its place.
///
/// # Safety
/// `symbol` is null or a C string; `pfn` null or the caller's out-pointer.
unsafe fn swap(r: c_int, symbol: *const c_char, pfn: *mut *mut c_void, version: Option<c_int>) {
    if r != 0 || symbol.is_null() || pfn.is_null() {
        return;
    }
    let _errno = crate::errno::Saved::new();
    // SAFETY: the caller's out-pointer and C string.
    let (found, base) = unsafe { (*pfn as usize, CStr::from_ptr(symbol).to_bytes()) };
    let Some(version) = version else { return };
    let Some((f, since)) = driver::by_base(base) else {
        return;
    };
    if found == 0 || !(since..KNOWN_BEFORE).contains(&version) || real::ours(found) {
        return;
    }
    let give = driver::hand_out(f, found);
    if give != found {
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { *pfn = give as *mut c_void };
    }
}

/// The driver's entry-point function `i` of [`ENTRY`] (their signatures are the same but for
/// `status`, which CUDA 11's ignores), then our hooks in what it wrote.
///
/// # Safety
/// The driver's contract.
unsafe fn proc_address(
    i: usize,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
    let Some(a) = ENTRY.address(i) else {
        return UNAVAILABLE;
    };
    // SAFETY: the driver's function, its signature (`status` is passed on as it came).
    let r = unsafe { core::mem::transmute::<usize, F>(a)(symbol, pfn, version, flags, status) };
    // SAFETY: the caller's pointers.
    unsafe { swap(r, symbol, pfn, Some(version)) };
    r
}

/// `cuGetProcAddress` (CUDA 11.3 to 12).
///
/// # Safety
/// The driver's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // SAFETY: forwarded as given.
    unsafe { proc_address(0, symbol, pfn, version, flags, status) }
}

/// `cuGetProcAddress_v2` (CUDA 12 and later).
///
/// # Safety
/// The driver's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // SAFETY: forwarded as given.
    unsafe { proc_address(1, symbol, pfn, version, flags, status) }
}

/// The runtime's own version (what `cudaGetDriverEntryPoint` answers for).
fn runtime_version() -> Option<c_int> {
    type F = unsafe extern "C" fn(*mut c_int) -> c_int;
    let a = real::address(Func::RuntimeGetVersion)?;
    let mut v: c_int = 0;
    // SAFETY: the runtime's `cudaRuntimeGetVersion`, a valid out-pointer; it needs no device.
    (unsafe { core::mem::transmute::<usize, F>(a)(&mut v) } == 0).then_some(v)
}

/// `cudaGetDriverEntryPoint`: the driver function for the runtime's own version.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut c_int) -> c_int;
    let Some(a) = real::address(Func::GetDriverEntryPoint) else {
        return UNAVAILABLE;
    };
    // SAFETY: the runtime's function (its CUDA 12 signature; CUDA 11's takes no `status`
    // and ignores the register).
    let r = unsafe { core::mem::transmute::<usize, F>(a)(symbol, pfn, flags, status) };
    if r == 0 {
        let version = runtime_version();
        // SAFETY: the caller's pointers.
        unsafe { swap(r, symbol, pfn, version) };
    }
    r
}

/// `cudaGetDriverEntryPointByVersion` (CUDA 12.5 and later; PyTorch's way to the driver).
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_uint,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    type F =
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_uint, u64, *mut c_int) -> c_int;
    let Some(a) = real::address(Func::GetDriverEntryPointByVersion) else {
        return UNAVAILABLE;
    };
    // SAFETY: the runtime's function, its signature.
    let r = unsafe { core::mem::transmute::<usize, F>(a)(symbol, pfn, version, flags, status) };
    // SAFETY: the caller's pointers.
    unsafe { swap(r, symbol, pfn, c_int::try_from(version).ok()) };
    r
}
