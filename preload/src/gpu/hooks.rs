//! The CUDA runtime functions interposed: each calls the runtime's own ([`super::real`]) and,
//! when it succeeded, tells the collector ([`super::send`]); what the caller gets back (the
//! result, the out-pointers, errno) is the runtime's, untouched. Exported unversioned, so they
//! also take the place of the versioned references frameworks link against
//! (`cudaMalloc@libcudart.so.13`): the dynamic loader lets an unversioned definition stand for
//! any version.
//!
//! Not seen: a runtime linked statically and not exported, and the per-thread-default-stream
//! variants (`_ptds`/`_ptsz`). The driver API is [`super::driver`].

#![allow(non_snake_case)] // the runtime's names

use libc::{c_int, c_uint, c_void, size_t};
use mlprof_wire::gpu::UNKNOWN_DEVICE;
use mlprof_wire::{gpu_copy, gpu_space};

use super::real::{self, Func};
use super::send;

/// What a hook returns when no runtime defines the function it stands for (a program that
/// looked the name up without loading CUDA): `cudaErrorUnknown`.
const UNAVAILABLE: c_int = 999;
/// `cudaSuccess`.
const SUCCESS: c_int = 0;

/// The runtime's `f`, as a function of type `$ty`, or return [`UNAVAILABLE`].
macro_rules! runtime {
    ($f:expr, $ty:ty) => {
        match real::address($f) {
            // SAFETY: the runtime's function of that name, which has this documented
            // signature.
            Some(a) => unsafe { core::mem::transmute::<usize, $ty>(a) },
            None => return UNAVAILABLE,
        }
    };
}

type Stream = *mut c_void;

/// CUDA's `dim3`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Dim3 {
    x: c_uint,
    y: c_uint,
    z: c_uint,
}

/// Read the pointer a successful allocation wrote (0 if there is none).
///
/// # Safety
/// `out` is null or the caller's out-pointer, which the runtime has written.
unsafe fn written(out: *mut *mut c_void) -> usize {
    if out.is_null() {
        0
    } else {
        // SAFETY: the caller's valid out-pointer (checked non-null).
        unsafe { *out as usize }
    }
}

/// What an allocation call of the runtime returned: told (the pointer it wrote) when it
/// succeeded and is the outermost CUDA call on the thread; returned unchanged.
///
/// # Safety
/// `out` is null or the caller's out-pointer, which the runtime wrote if `r` is success.
unsafe fn allocated(
    r: c_int,
    call: &send::Call,
    out: *mut *mut c_void,
    size: size_t,
    space: u8,
) -> c_int {
    if r == SUCCESS && call.outermost() {
        let device = if space == gpu_space::PINNED {
            UNKNOWN_DEVICE
        } else {
            send::runtime_device()
        };
        // SAFETY: the caller's contract.
        send::alloc(unsafe { written(out) }, size, space, device);
    }
    r
}

/// What a free of the runtime returned: told when it succeeded and is the outermost call.
fn freed(r: c_int, call: &send::Call, ptr: *mut c_void, space: u8) -> c_int {
    if r == SUCCESS && call.outermost() {
        send::free(ptr as usize, space);
    }
    r
}

/// `cudaMalloc`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMalloc(ptr: *mut *mut c_void, size: size_t) -> c_int {
    let f = runtime!(
        Func::Malloc,
        unsafe extern "C" fn(*mut *mut c_void, size_t) -> c_int
    );
    let call = send::Call::begin();
    // SAFETY: forwarded as given; the runtime writes `*ptr` when it succeeds.
    unsafe { allocated(f(ptr, size), &call, ptr, size, gpu_space::DEVICE) }
}

/// `cudaMallocAsync`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMallocAsync(ptr: *mut *mut c_void, size: size_t, s: Stream) -> c_int {
    type F = unsafe extern "C" fn(*mut *mut c_void, size_t, Stream) -> c_int;
    let f = runtime!(Func::MallocAsync, F);
    let call = send::Call::begin();
    // SAFETY: forwarded as given; the runtime writes `*ptr` when it succeeds.
    unsafe { allocated(f(ptr, size, s), &call, ptr, size, gpu_space::DEVICE) }
}

/// `cudaMallocManaged`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMallocManaged(
    ptr: *mut *mut c_void,
    size: size_t,
    flags: c_uint,
) -> c_int {
    type F = unsafe extern "C" fn(*mut *mut c_void, size_t, c_uint) -> c_int;
    let f = runtime!(Func::MallocManaged, F);
    let call = send::Call::begin();
    // SAFETY: forwarded as given; the runtime writes `*ptr` when it succeeds.
    unsafe { allocated(f(ptr, size, flags), &call, ptr, size, gpu_space::MANAGED) }
}

/// `cudaMallocHost`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMallocHost(ptr: *mut *mut c_void, size: size_t) -> c_int {
    let f = runtime!(
        Func::MallocHost,
        unsafe extern "C" fn(*mut *mut c_void, size_t) -> c_int
    );
    let call = send::Call::begin();
    // SAFETY: forwarded as given; the runtime writes `*ptr` when it succeeds.
    unsafe { allocated(f(ptr, size), &call, ptr, size, gpu_space::PINNED) }
}

/// `cudaHostAlloc`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaHostAlloc(
    ptr: *mut *mut c_void,
    size: size_t,
    flags: c_uint,
) -> c_int {
    type F = unsafe extern "C" fn(*mut *mut c_void, size_t, c_uint) -> c_int;
    let f = runtime!(Func::HostAlloc, F);
    let call = send::Call::begin();
    // SAFETY: forwarded as given; the runtime writes `*ptr` when it succeeds.
    unsafe { allocated(f(ptr, size, flags), &call, ptr, size, gpu_space::PINNED) }
}

/// `cudaFree`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaFree(ptr: *mut c_void) -> c_int {
    let f = runtime!(Func::Free, unsafe extern "C" fn(*mut c_void) -> c_int);
    let call = send::Call::begin();
    // SAFETY: forwarded as given.
    freed(unsafe { f(ptr) }, &call, ptr, gpu_space::DEVICE)
}

/// `cudaFreeAsync`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaFreeAsync(ptr: *mut c_void, s: Stream) -> c_int {
    let f = runtime!(
        Func::FreeAsync,
        unsafe extern "C" fn(*mut c_void, Stream) -> c_int
    );
    let call = send::Call::begin();
    // SAFETY: forwarded as given.
    freed(unsafe { f(ptr, s) }, &call, ptr, gpu_space::DEVICE)
}

/// `cudaFreeHost`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaFreeHost(ptr: *mut c_void) -> c_int {
    let f = runtime!(Func::FreeHost, unsafe extern "C" fn(*mut c_void) -> c_int);
    let call = send::Call::begin();
    // SAFETY: forwarded as given.
    freed(unsafe { f(ptr) }, &call, ptr, gpu_space::PINNED)
}

/// Whether `p` is device (or managed) memory, as the runtime describes it; `None` when it
/// cannot say without disturbing the program's last-error state.
fn on_device(p: *const c_void) -> Option<bool> {
    type Peek = unsafe extern "C" fn() -> c_int;
    type Attributes = unsafe extern "C" fn(*mut c_void, *const c_void) -> c_int;
    let _errno = crate::errno::Saved::new();
    let peek = real::address(Func::PeekAtLastError)?;
    let attributes = real::address(Func::PointerGetAttributes)?;
    let clear = real::address(Func::GetLastError)?;
    // SAFETY: the runtime's functions with their documented signatures.
    let (peek, attributes, clear) = unsafe {
        (
            core::mem::transmute::<usize, Peek>(peek),
            core::mem::transmute::<usize, Attributes>(attributes),
            core::mem::transmute::<usize, Peek>(clear),
        )
    };
    // SAFETY: takes no arguments.
    if unsafe { peek() } != SUCCESS {
        return None; // an error the program has not read yet: leave it alone
    }
    // `cudaPointerAttributes` (24 bytes since CUDA 11, `type` first); room to spare.
    let mut out = [0u64; 16];
    // SAFETY: a writable buffer larger than the structure; any pointer value is valid input.
    if unsafe { attributes(out.as_mut_ptr().cast(), p) } != SUCCESS {
        // SAFETY: takes no arguments; resets the error our query set (there was none before).
        unsafe { clear() };
        return None;
    }
    let kind = out.first().map_or(0, |w| *w as u32);
    Some(kind == 2 || kind == 3) // cudaMemoryTypeDevice, cudaMemoryTypeManaged
}

/// The direction of a copy of `kind` (`cudaMemcpyKind`) from `src` to `dst`.
fn direction(kind: c_int, dst: *const c_void, src: *const c_void) -> u8 {
    match kind {
        0 => gpu_copy::HOST_TO_HOST,
        1 => gpu_copy::HOST_TO_DEVICE,
        2 => gpu_copy::DEVICE_TO_HOST,
        3 => gpu_copy::DEVICE_TO_DEVICE,
        4 => match (on_device(src), on_device(dst)) {
            (Some(false), Some(false)) => gpu_copy::HOST_TO_HOST,
            (Some(false), Some(true)) => gpu_copy::HOST_TO_DEVICE,
            (Some(true), Some(false)) => gpu_copy::DEVICE_TO_HOST,
            (Some(true), Some(true)) => gpu_copy::DEVICE_TO_DEVICE,
            _ => gpu_copy::UNKNOWN,
        },
        _ => gpu_copy::UNKNOWN,
    }
}

/// `cudaMemcpy`: a copy the host waits for.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    n: size_t,
    kind: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void, *const c_void, size_t, c_int) -> c_int;
    let f = runtime!(Func::Memcpy, F);
    let call = send::Call::begin();
    let since = send::wait_begin(&call);
    // SAFETY: forwarded as given.
    let r = unsafe { f(dst, src, n, kind) };
    send::wait_end(&call, since);
    if r == SUCCESS && call.outermost() {
        send::copy(n, direction(kind, dst, src), true);
    }
    r
}

/// `cudaMemcpyAsync`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    n: size_t,
    kind: c_int,
    s: Stream,
) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void, *const c_void, size_t, c_int, Stream) -> c_int;
    let f = runtime!(Func::MemcpyAsync, F);
    let call = send::Call::begin();
    // SAFETY: forwarded as given.
    let r = unsafe { f(dst, src, n, kind, s) };
    if r == SUCCESS && call.outermost() {
        send::copy(n, direction(kind, dst, src), false);
    }
    r
}

/// `cudaMemcpy2D`: a copy the host waits for.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpy2D(
    dst: *mut c_void,
    dpitch: size_t,
    src: *const c_void,
    spitch: size_t,
    width: size_t,
    height: size_t,
    kind: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(
        *mut c_void,
        size_t,
        *const c_void,
        size_t,
        size_t,
        size_t,
        c_int,
    ) -> c_int;
    let f = runtime!(Func::Memcpy2D, F);
    let call = send::Call::begin();
    let since = send::wait_begin(&call);
    // SAFETY: forwarded as given.
    let r = unsafe { f(dst, dpitch, src, spitch, width, height, kind) };
    send::wait_end(&call, since);
    if r == SUCCESS && call.outermost() {
        let bytes = width.saturating_mul(height);
        send::copy(bytes, direction(kind, dst, src), true);
    }
    r
}

/// `cudaMemcpy2DAsync`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::too_many_arguments)] // the runtime's signature
pub unsafe extern "C" fn cudaMemcpy2DAsync(
    dst: *mut c_void,
    dpitch: size_t,
    src: *const c_void,
    spitch: size_t,
    width: size_t,
    height: size_t,
    kind: c_int,
    s: Stream,
) -> c_int {
    type F = unsafe extern "C" fn(
        *mut c_void,
        size_t,
        *const c_void,
        size_t,
        size_t,
        size_t,
        c_int,
        Stream,
    ) -> c_int;
    let f = runtime!(Func::Memcpy2DAsync, F);
    let call = send::Call::begin();
    // SAFETY: forwarded as given.
    let r = unsafe { f(dst, dpitch, src, spitch, width, height, kind, s) };
    if r == SUCCESS && call.outermost() {
        let bytes = width.saturating_mul(height);
        send::copy(bytes, direction(kind, dst, src), false);
    }
    r
}

/// `cudaMemcpyPeer`: a device-to-device copy the host waits for.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpyPeer(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    n: size_t,
) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, c_int, size_t) -> c_int;
    let f = runtime!(Func::MemcpyPeer, F);
    let call = send::Call::begin();
    let since = send::wait_begin(&call);
    // SAFETY: forwarded as given.
    let r = unsafe { f(dst, dst_device, src, src_device, n) };
    send::wait_end(&call, since);
    if r == SUCCESS && call.outermost() {
        send::copy(n, gpu_copy::DEVICE_TO_DEVICE, true);
    }
    r
}

/// `cudaMemcpyPeerAsync`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    n: size_t,
    s: Stream,
) -> c_int {
    type F =
        unsafe extern "C" fn(*mut c_void, c_int, *const c_void, c_int, size_t, Stream) -> c_int;
    let f = runtime!(Func::MemcpyPeerAsync, F);
    let call = send::Call::begin();
    // SAFETY: forwarded as given.
    let r = unsafe { f(dst, dst_device, src, src_device, n, s) };
    if r == SUCCESS && call.outermost() {
        send::copy(n, gpu_copy::DEVICE_TO_DEVICE, false);
    }
    r
}

/// `cudaStreamSynchronize`: the host waits for the stream's work.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaStreamSynchronize(s: Stream) -> c_int {
    let f = runtime!(
        Func::StreamSynchronize,
        unsafe extern "C" fn(Stream) -> c_int
    );
    let call = send::Call::begin();
    let since = send::wait_begin(&call);
    // SAFETY: forwarded as given.
    let r = unsafe { f(s) };
    send::wait_end(&call, since);
    r
}

/// `cudaDeviceSynchronize`: the host waits for all of the device's work.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> c_int {
    let f = runtime!(Func::DeviceSynchronize, unsafe extern "C" fn() -> c_int);
    let call = send::Call::begin();
    let since = send::wait_begin(&call);
    // SAFETY: takes no arguments.
    let r = unsafe { f() };
    send::wait_end(&call, since);
    r
}

/// `cudaEventSynchronize`: the host waits for an event.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaEventSynchronize(event: *mut c_void) -> c_int {
    let f = runtime!(
        Func::EventSynchronize,
        unsafe extern "C" fn(*mut c_void) -> c_int
    );
    let call = send::Call::begin();
    let since = send::wait_begin(&call);
    // SAFETY: forwarded as given.
    let r = unsafe { f(event) };
    send::wait_end(&call, since);
    r
}

/// `cudaLaunchKernel`.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaLaunchKernel(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: size_t,
    s: Stream,
) -> c_int {
    type F =
        unsafe extern "C" fn(*const c_void, Dim3, Dim3, *mut *mut c_void, size_t, Stream) -> c_int;
    let f = runtime!(Func::LaunchKernel, F);
    let call = send::Call::begin();
    let token = send::launch_begin(&call, func as usize);
    // SAFETY: forwarded as given.
    let r = unsafe { f(func, grid, block, args, shared, s) };
    send::launch_end(token, r == SUCCESS);
    r
}

/// `cudaLaunchKernelExC` (launches with attributes).
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaLaunchKernelExC(
    config: *const c_void,
    func: *const c_void,
    args: *mut *mut c_void,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_void, *const c_void, *mut *mut c_void) -> c_int;
    let f = runtime!(Func::LaunchKernelExC, F);
    let call = send::Call::begin();
    let token = send::launch_begin(&call, func as usize);
    // SAFETY: forwarded as given.
    let r = unsafe { f(config, func, args) };
    send::launch_end(token, r == SUCCESS);
    r
}

/// `cudaGraphLaunch`: counted as one launch.
///
/// # Safety
/// The runtime's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch(graph: *mut c_void, s: Stream) -> c_int {
    let f = runtime!(
        Func::GraphLaunch,
        unsafe extern "C" fn(*mut c_void, Stream) -> c_int
    );
    let call = send::Call::begin();
    let token = send::launch_begin(&call, graph as usize);
    // SAFETY: forwarded as given.
    let r = unsafe { f(graph, s) };
    send::launch_end(token, r == SUCCESS);
    r
}
