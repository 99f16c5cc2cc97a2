//! The CUDA runtime's own functions, found the first time each is needed: in the loaded
//! `libcudart.so.*` (frameworks load it `RTLD_LOCAL`, as a dependency of their own libraries,
//! so `dlsym(RTLD_NEXT)` alone would not see it), else the next definition after this library
//! in the global scope (a runtime linked into a program that exports its symbols). Nothing
//! here loads a library: a program that never loads the runtime never comes here.
//!
//! Only CUDA calls come here, never a signal handler or an allocation hook: the first call of
//! each function takes the loader's lock (`dl_iterate_phdr`, `dlopen` with `RTLD_NOLOAD`,
//! `dlsym`), once; afterwards a lookup is one atomic load.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The runtime functions the hooks call through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Func {
    Malloc,
    Free,
    MallocAsync,
    FreeAsync,
    MallocManaged,
    MallocHost,
    HostAlloc,
    FreeHost,
    Memcpy,
    MemcpyAsync,
    Memcpy2D,
    Memcpy2DAsync,
    MemcpyPeer,
    MemcpyPeerAsync,
    StreamSynchronize,
    DeviceSynchronize,
    EventSynchronize,
    LaunchKernel,
    LaunchKernelExC,
    GraphLaunch,
    GetDevice,
    PointerGetAttributes,
    PeekAtLastError,
    GetLastError,
}

const COUNT: usize = 24;

/// Each function's name in the runtime, in [`Func`] order.
const NAMES: [&CStr; COUNT] = [
    c"cudaMalloc",
    c"cudaFree",
    c"cudaMallocAsync",
    c"cudaFreeAsync",
    c"cudaMallocManaged",
    c"cudaMallocHost",
    c"cudaHostAlloc",
    c"cudaFreeHost",
    c"cudaMemcpy",
    c"cudaMemcpyAsync",
    c"cudaMemcpy2D",
    c"cudaMemcpy2DAsync",
    c"cudaMemcpyPeer",
    c"cudaMemcpyPeerAsync",
    c"cudaStreamSynchronize",
    c"cudaDeviceSynchronize",
    c"cudaEventSynchronize",
    c"cudaLaunchKernel",
    c"cudaLaunchKernelExC",
    c"cudaGraphLaunch",
    c"cudaGetDevice",
    c"cudaPointerGetAttributes",
    c"cudaPeekAtLastError",
    c"cudaGetLastError",
];

/// The functions found so far (0: not yet).
static FOUND: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

/// The address of `f` in the runtime, or `None` when no runtime defines it (the call came
/// from a program that looked our symbol up without loading CUDA).
#[inline]
pub fn address(f: Func) -> Option<usize> {
    let slot = FOUND.get(f as usize)?;
    match slot.load(Ordering::Acquire) {
        0 => {
            let found = find(f)?;
            slot.store(found, Ordering::Release);
            Some(found)
        }
        found => Some(found),
    }
}

/// Most bytes of the runtime's path kept while looking for it.
const PATH_BYTES: usize = 4096;

struct Search {
    path: [u8; PATH_BYTES],
    found: bool,
}

/// `dl_iterate_phdr` callback: keep the path of the first loaded `libcudart.so*`.
unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `Search` passed by `find`, alive for the iteration; `info` is the
    // loader's description of one object, valid during the callback.
    let (search, name) = unsafe { (&mut *(data as *mut Search), (*info).dlpi_name) };
    if name.is_null() {
        return 0;
    }
    // SAFETY: the loader's NUL-terminated object name.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    if !base.starts_with(b"libcudart.so") || name.len() >= PATH_BYTES {
        return 0;
    }
    for (to, from) in search.path.iter_mut().zip(name.iter().chain(&[0])) {
        *to = *from;
    }
    search.found = true;
    1
}

fn find(f: Func) -> Option<usize> {
    let name = NAMES.get(f as usize)?;
    let mut search = Search {
        path: [0; PATH_BYTES],
        found: false,
    };
    // SAFETY: `visit` only reads the loader's description and writes `search`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    if search.found {
        // SAFETY: a NUL-terminated path; RTLD_NOLOAD never loads anything, it only returns a
        // handle (one more reference) to an object already loaded, or null.
        let handle = unsafe {
            libc::dlopen(
                search.path.as_ptr() as *const c_char,
                libc::RTLD_NOLOAD | libc::RTLD_LAZY,
            )
        };
        if !handle.is_null() {
            // SAFETY: a valid handle and C string; the handle is given back at once (the
            // object stays loaded by whoever loaded it).
            let found = unsafe {
                let found = libc::dlsym(handle, name.as_ptr());
                libc::dlclose(handle);
                found
            };
            if !found.is_null() && !ours(found as usize) {
                return Some(found as usize);
            }
        }
    }
    // SAFETY: a valid C string; RTLD_NEXT searches the objects loaded after this one.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    (!next.is_null() && !ours(next as usize)).then_some(next as usize)
}

/// Whether `address` lies in this library (never forward a call to ourselves).
fn ours(address: usize) -> bool {
    let base = |p: usize| {
        // SAFETY: Dl_info is plain data, filled by dladdr for any address.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables.
        (unsafe { libc::dladdr(p as *const c_void, &mut info) } != 0).then_some(info.dli_fbase)
    };
    let here = base(ours as fn(usize) -> bool as usize);
    here.is_some() && base(address) == here
}
