//! The driver functions interposed, each once ([`super::driver_hooks!`] makes its exported and
//! its handed-out hook). A `CUdeviceptr` or an allocation handle is a `u64`; `cuGetProcAddress`
//! names and first versions (1000 x major + 10 x minor) are those of the signatures below.

use core::ffi::{c_int, c_uint, c_void};

use libc::size_t;
use mlprof_wire::{gpu_copy, gpu_space};

use super::{allocated, copied, direction, freed, launched, send};

type Stream = *mut c_void;
type Params = *mut *mut c_void;

/// Device of a `CUmemAllocationProp` whose location is a device (`CU_MEM_LOCATION_TYPE_DEVICE`).
///
/// # Safety
/// `prop` is null or points to a `CUmemAllocationProp` (the caller's contract).
unsafe fn prop_device(prop: *const c_void) -> u32 {
    if prop.is_null() {
        return mlprof_wire::gpu::UNKNOWN_DEVICE;
    }
    // The structure begins: type, requestedHandleTypes, location { type, id } (4 bytes each).
    let words = prop.cast::<i32>();
    // SAFETY: within the structure, which is larger than 16 bytes; read unaligned to be safe.
    let (kind, id) = unsafe { (words.add(2).read_unaligned(), words.add(3).read_unaligned()) };
    if kind == 1 && id >= 0 {
        id as u32
    } else {
        mlprof_wire::gpu::UNKNOWN_DEVICE
    }
}

driver_hooks! {
    /// `cuMemAlloc_v2`: device memory.
    fn cuMemAlloc_v2 / handed_cuMemAlloc [MemAlloc, "cuMemAlloc", 3020]
        (dptr: *mut u64, size: size_t) |f, call| {
        // SAFETY: forwarded as given; the driver writes `*dptr` when it succeeds.
        unsafe { allocated(f(dptr, size), &call, dptr, size, gpu_space::DEVICE) }
    }

    /// `cuMemAllocAsync`: stream-ordered device memory.
    fn cuMemAllocAsync / handed_cuMemAllocAsync [MemAllocAsync, "cuMemAllocAsync", 11020]
        (dptr: *mut u64, size: size_t, s: Stream) |f, call| {
        // SAFETY: forwarded as given; the driver writes `*dptr` when it succeeds.
        unsafe { allocated(f(dptr, size, s), &call, dptr, size, gpu_space::DEVICE) }
    }

    /// `cuMemAllocFromPoolAsync`: stream-ordered device memory from a pool.
    fn cuMemAllocFromPoolAsync / handed_cuMemAllocFromPoolAsync
        [MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020]
        (dptr: *mut u64, size: size_t, pool: *mut c_void, s: Stream) |f, call| {
        // SAFETY: forwarded as given; the driver writes `*dptr` when it succeeds.
        unsafe { allocated(f(dptr, size, pool, s), &call, dptr, size, gpu_space::DEVICE) }
    }

    /// `cuMemAllocManaged`: managed memory.
    fn cuMemAllocManaged / handed_cuMemAllocManaged [MemAllocManaged, "cuMemAllocManaged", 6000]
        (dptr: *mut u64, size: size_t, flags: c_uint) |f, call| {
        // SAFETY: forwarded as given; the driver writes `*dptr` when it succeeds.
        unsafe { allocated(f(dptr, size, flags), &call, dptr, size, gpu_space::MANAGED) }
    }

    /// `cuMemAllocPitch_v2`: pitched device memory, `pitch` x `height` bytes.
    fn cuMemAllocPitch_v2 / handed_cuMemAllocPitch [MemAllocPitch, "cuMemAllocPitch", 3020]
        (dptr: *mut u64, pitch: *mut size_t, width: size_t, height: size_t, elem: c_uint)
        |f, call| {
        // SAFETY: forwarded as given; the driver writes both out-pointers when it succeeds.
        let r = unsafe { f(dptr, pitch, width, height, elem) };
        let size = if r == super::SUCCESS && !pitch.is_null() {
            // SAFETY: the caller's out-pointer, written by the driver.
            unsafe { pitch.read_unaligned() }.saturating_mul(height)
        } else {
            0
        };
        // SAFETY: as above.
        unsafe { allocated(r, &call, dptr, size, gpu_space::DEVICE) }
    }

    /// `cuMemAllocHost_v2`: pinned host memory.
    fn cuMemAllocHost_v2 / handed_cuMemAllocHost [MemAllocHost, "cuMemAllocHost", 3020]
        (pp: *mut *mut c_void, size: size_t) |f, call| {
        // SAFETY: forwarded as given; the driver writes `*pp` when it succeeds.
        unsafe { allocated(f(pp, size), &call, pp.cast(), size, gpu_space::PINNED) }
    }

    /// `cuMemHostAlloc`: pinned host memory.
    fn cuMemHostAlloc / handed_cuMemHostAlloc [MemHostAlloc, "cuMemHostAlloc", 2020]
        (pp: *mut *mut c_void, size: size_t, flags: c_uint) |f, call| {
        // SAFETY: forwarded as given; the driver writes `*pp` when it succeeds.
        unsafe { allocated(f(pp, size, flags), &call, pp.cast(), size, gpu_space::PINNED) }
    }

    /// `cuMemCreate`: physical device memory for virtual mappings, known by its handle
    /// (PyTorch's expandable segments grow by these).
    fn cuMemCreate / handed_cuMemCreate [MemCreate, "cuMemCreate", 10020]
        (handle: *mut u64, size: size_t, prop: *const c_void, flags: u64) |f, call| {
        // SAFETY: forwarded as given; the driver writes `*handle` when it succeeds.
        let r = unsafe { f(handle, size, prop, flags) };
        if r == super::SUCCESS && call.outermost() && !handle.is_null() {
            // SAFETY: the caller's out-pointer, written; `prop` by the caller's contract.
            let (id, device) = unsafe { (handle.read_unaligned(), prop_device(prop)) };
            send::alloc(id as usize, size, gpu_space::PHYSICAL, device);
        }
        r
    }

    /// `cuMemFree_v2`.
    fn cuMemFree_v2 / handed_cuMemFree [MemFree, "cuMemFree", 3020] (dptr: u64) |f, call| {
        // SAFETY: forwarded as given.
        freed(unsafe { f(dptr) }, &call, dptr, gpu_space::DEVICE)
    }

    /// `cuMemFreeAsync`.
    fn cuMemFreeAsync / handed_cuMemFreeAsync [MemFreeAsync, "cuMemFreeAsync", 11020]
        (dptr: u64, s: Stream) |f, call| {
        // SAFETY: forwarded as given.
        freed(unsafe { f(dptr, s) }, &call, dptr, gpu_space::DEVICE)
    }

    /// `cuMemFreeHost`.
    fn cuMemFreeHost / handed_cuMemFreeHost [MemFreeHost, "cuMemFreeHost", 2000]
        (p: *mut c_void) |f, call| {
        // SAFETY: forwarded as given.
        freed(unsafe { f(p) }, &call, p as u64, gpu_space::PINNED)
    }

    /// `cuMemRelease`: gives back what `cuMemCreate` made.
    fn cuMemRelease / handed_cuMemRelease [MemRelease, "cuMemRelease", 10020]
        (handle: u64) |f, call| {
        // SAFETY: forwarded as given.
        freed(unsafe { f(handle) }, &call, handle, gpu_space::PHYSICAL)
    }

    /// `cuMemcpyHtoD_v2`: a copy the host waits for.
    fn cuMemcpyHtoD_v2 / handed_cuMemcpyHtoD [MemcpyHtoD, "cuMemcpyHtoD", 3020]
        (dst: u64, src: *const c_void, n: size_t) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given.
        let r = unsafe { f(dst, src, n) };
        send::wait_end(&call, since);
        copied(r, &call, n, gpu_copy::HOST_TO_DEVICE, true)
    }

    /// `cuMemcpyDtoH_v2`: a copy the host waits for.
    fn cuMemcpyDtoH_v2 / handed_cuMemcpyDtoH [MemcpyDtoH, "cuMemcpyDtoH", 3020]
        (dst: *mut c_void, src: u64, n: size_t) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given.
        let r = unsafe { f(dst, src, n) };
        send::wait_end(&call, since);
        copied(r, &call, n, gpu_copy::DEVICE_TO_HOST, true)
    }

    /// `cuMemcpyDtoD_v2`.
    fn cuMemcpyDtoD_v2 / handed_cuMemcpyDtoD [MemcpyDtoD, "cuMemcpyDtoD", 3020]
        (dst: u64, src: u64, n: size_t) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given.
        let r = unsafe { f(dst, src, n) };
        send::wait_end(&call, since);
        copied(r, &call, n, gpu_copy::DEVICE_TO_DEVICE, true)
    }

    /// `cuMemcpyHtoDAsync_v2`.
    fn cuMemcpyHtoDAsync_v2 / handed_cuMemcpyHtoDAsync
        [MemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020]
        (dst: u64, src: *const c_void, n: size_t, s: Stream) |f, call| {
        // SAFETY: forwarded as given.
        copied(unsafe { f(dst, src, n, s) }, &call, n, gpu_copy::HOST_TO_DEVICE, false)
    }

    /// `cuMemcpyDtoHAsync_v2`.
    fn cuMemcpyDtoHAsync_v2 / handed_cuMemcpyDtoHAsync
        [MemcpyDtoHAsync, "cuMemcpyDtoHAsync", 3020]
        (dst: *mut c_void, src: u64, n: size_t, s: Stream) |f, call| {
        // SAFETY: forwarded as given.
        copied(unsafe { f(dst, src, n, s) }, &call, n, gpu_copy::DEVICE_TO_HOST, false)
    }

    /// `cuMemcpyDtoDAsync_v2`.
    fn cuMemcpyDtoDAsync_v2 / handed_cuMemcpyDtoDAsync
        [MemcpyDtoDAsync, "cuMemcpyDtoDAsync", 3020]
        (dst: u64, src: u64, n: size_t, s: Stream) |f, call| {
        // SAFETY: forwarded as given.
        copied(unsafe { f(dst, src, n, s) }, &call, n, gpu_copy::DEVICE_TO_DEVICE, false)
    }

    /// `cuMemcpy`: between unified addresses, the direction asked of the driver; the host
    /// waits for it.
    fn cuMemcpy / handed_cuMemcpy [Memcpy, "cuMemcpy", 4000]
        (dst: u64, src: u64, n: size_t) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given.
        let r = unsafe { f(dst, src, n) };
        send::wait_end(&call, since);
        let told = r == super::SUCCESS && call.outermost();
        let way = if told { direction(dst, src) } else { gpu_copy::UNKNOWN };
        copied(r, &call, n, way, true)
    }

    /// `cuMemcpyAsync`: between unified addresses.
    fn cuMemcpyAsync / handed_cuMemcpyAsync [MemcpyAsync, "cuMemcpyAsync", 4000]
        (dst: u64, src: u64, n: size_t, s: Stream) |f, call| {
        // SAFETY: forwarded as given.
        let r = unsafe { f(dst, src, n, s) };
        let told = r == super::SUCCESS && call.outermost();
        let way = if told { direction(dst, src) } else { gpu_copy::UNKNOWN };
        copied(r, &call, n, way, false)
    }

    /// `cuMemcpyPeer`: between devices; the host waits for it.
    fn cuMemcpyPeer / handed_cuMemcpyPeer [MemcpyPeer, "cuMemcpyPeer", 4000]
        (dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, n: size_t) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given.
        let r = unsafe { f(dst, dst_ctx, src, src_ctx, n) };
        send::wait_end(&call, since);
        copied(r, &call, n, gpu_copy::DEVICE_TO_DEVICE, true)
    }

    /// `cuMemcpyPeerAsync`.
    fn cuMemcpyPeerAsync / handed_cuMemcpyPeerAsync [MemcpyPeerAsync, "cuMemcpyPeerAsync", 4000]
        (dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, n: size_t, s: Stream)
        |f, call| {
        // SAFETY: forwarded as given.
        let r = unsafe { f(dst, dst_ctx, src, src_ctx, n, s) };
        copied(r, &call, n, gpu_copy::DEVICE_TO_DEVICE, false)
    }

    /// `cuStreamSynchronize`: the host waits for the stream's work.
    fn cuStreamSynchronize / handed_cuStreamSynchronize
        [StreamSynchronize, "cuStreamSynchronize", 2000] (s: Stream) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given.
        let r = unsafe { f(s) };
        send::wait_end(&call, since);
        r
    }

    /// `cuCtxSynchronize`: the host waits for the context's work. Takes no argument; the
    /// first argument register is passed on as it came, for a later version that takes the
    /// context.
    fn cuCtxSynchronize / handed_cuCtxSynchronize [CtxSynchronize, "cuCtxSynchronize", 2000]
        (ctx: *mut c_void) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given (a function of no argument ignores it).
        let r = unsafe { f(ctx) };
        send::wait_end(&call, since);
        r
    }

    /// `cuEventSynchronize`: the host waits for an event.
    fn cuEventSynchronize / handed_cuEventSynchronize
        [EventSynchronize, "cuEventSynchronize", 2000] (event: *mut c_void) |f, call| {
        let since = send::wait_begin(&call);
        // SAFETY: forwarded as given.
        let r = unsafe { f(event) };
        send::wait_end(&call, since);
        r
    }

    /// `cuLaunchKernel`.
    fn cuLaunchKernel / handed_cuLaunchKernel [LaunchKernel, "cuLaunchKernel", 4000]
        (func: *mut c_void, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
         bz: c_uint, shared: c_uint, s: Stream, params: Params, extra: Params) |f, call| {
        let token = send::launch_begin(&call, func as usize);
        // SAFETY: forwarded as given.
        let r = unsafe { f(func, gx, gy, gz, bx, by, bz, shared, s, params, extra) };
        launched(r, token)
    }

    /// `cuLaunchKernelEx` (launches with attributes).
    fn cuLaunchKernelEx / handed_cuLaunchKernelEx [LaunchKernelEx, "cuLaunchKernelEx", 11060]
        (config: *const c_void, func: *mut c_void, params: Params, extra: Params) |f, call| {
        let token = send::launch_begin(&call, func as usize);
        // SAFETY: forwarded as given.
        launched(unsafe { f(config, func, params, extra) }, token)
    }

    /// `cuGraphLaunch`: counted as one launch.
    fn cuGraphLaunch / handed_cuGraphLaunch [GraphLaunch, "cuGraphLaunch", 10000]
        (exec: *mut c_void, s: Stream) |f, call| {
        let token = send::launch_begin(&call, exec as usize);
        // SAFETY: forwarded as given.
        launched(unsafe { f(exec, s) }, token)
    }
}
