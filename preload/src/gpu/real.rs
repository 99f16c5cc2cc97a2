//! The CUDA libraries' own functions, found the first time each is needed: in the loaded
//! library (`libcudart.so.*` for the runtime, `libcuda.so.*` for the driver; frameworks load
//! the runtime `RTLD_LOCAL`, as a dependency of their own libraries, so `dlsym(RTLD_NEXT)` alone
//! would not see it), else the next definition after this library in the global scope (a
//! runtime linked into a program that exports its symbols). Nothing here loads a library: a
//! program that never loads CUDA never comes here.
//!
//! Only CUDA calls come here, never a signal handler or an allocation hook: the first call of
//! each function takes the loader's lock (`dl_iterate_phdr`, `dlopen` with `RTLD_NOLOAD`,
//! `dlsym`), once; afterwards a lookup is one atomic load.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};

use super::dl;

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
    RuntimeGetVersion,
    GetDriverEntryPoint,
    GetDriverEntryPointByVersion,
}

const COUNT: usize = 27;

/// Every [`Func`], in order.
const ALL: [Func; COUNT] = [
    Func::Malloc,
    Func::Free,
    Func::MallocAsync,
    Func::FreeAsync,
    Func::MallocManaged,
    Func::MallocHost,
    Func::HostAlloc,
    Func::FreeHost,
    Func::Memcpy,
    Func::MemcpyAsync,
    Func::Memcpy2D,
    Func::Memcpy2DAsync,
    Func::MemcpyPeer,
    Func::MemcpyPeerAsync,
    Func::StreamSynchronize,
    Func::DeviceSynchronize,
    Func::EventSynchronize,
    Func::LaunchKernel,
    Func::LaunchKernelExC,
    Func::GraphLaunch,
    Func::GetDevice,
    Func::PointerGetAttributes,
    Func::PeekAtLastError,
    Func::GetLastError,
    Func::RuntimeGetVersion,
    Func::GetDriverEntryPoint,
    Func::GetDriverEntryPointByVersion,
];

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
    c"cudaRuntimeGetVersion",
    c"cudaGetDriverEntryPoint",
    c"cudaGetDriverEntryPointByVersion",
];

/// Functions of one CUDA library, found the first time each is needed.
pub struct Slots<const N: usize> {
    /// The start of the library's file name (`libcudart.so`, `libcuda.so`).
    prefix: &'static [u8],
    names: [&'static CStr; N],
    /// The addresses found so far (0: not yet).
    found: [AtomicUsize; N],
}

impl<const N: usize> Slots<N> {
    /// The functions `names` of the library whose file name starts with `prefix`.
    pub const fn new(prefix: &'static [u8], names: [&'static CStr; N]) -> Self {
        Slots {
            prefix,
            names,
            found: [const { AtomicUsize::new(0) }; N],
        }
    }

    /// The address of function `i`, or `None` when no loaded library defines it (the call
    /// came from a program that looked our symbol up without loading CUDA).
    #[inline]
    pub fn address(&self, i: usize) -> Option<usize> {
        let slot = self.found.get(i)?;
        match slot.load(Ordering::Acquire) {
            0 => {
                let found = find(self.prefix, self.names.get(i)?)?;
                slot.store(found, Ordering::Release);
                Some(found)
            }
            found => Some(found),
        }
    }

    /// The function named exactly `name`, if it is one of these.
    pub fn index(&self, name: &[u8]) -> Option<usize> {
        self.names.iter().position(|n| n.to_bytes() == name)
    }
}

static RUNTIME: Slots<COUNT> = Slots::new(b"libcudart.so", NAMES);

/// The address of `f` in the runtime, or `None` when no runtime defines it.
#[inline]
pub fn address(f: Func) -> Option<usize> {
    RUNTIME.address(f as usize)
}

/// The runtime function named exactly `name`, if the hooks use it.
pub fn by_name(name: &[u8]) -> Option<Func> {
    RUNTIME.index(name).and_then(|i| ALL.get(i).copied())
}

/// Most bytes of the library's path kept while looking for it.
pub const PATH_BYTES: usize = 4096;

struct Search {
    prefix: &'static [u8],
    path: [u8; PATH_BYTES],
    found: bool,
}

/// `dl_iterate_phdr` callback: keep the path of the first loaded library whose file name
/// starts with the prefix.
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
    if !base.starts_with(search.prefix) || name.len() >= PATH_BYTES {
        return 0;
    }
    for (to, from) in search.path.iter_mut().zip(name.iter().chain(&[0])) {
        *to = *from;
    }
    search.found = true;
    1
}

/// The path of the first loaded library whose file name starts with `prefix`, NUL-terminated.
pub fn loaded_path(prefix: &'static [u8]) -> Option<[u8; PATH_BYTES]> {
    let mut search = Search {
        prefix,
        path: [0; PATH_BYTES],
        found: false,
    };
    // SAFETY: `visit` only reads the loader's description and writes `search`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found.then_some(search.path)
}

fn find(prefix: &'static [u8], name: &CStr) -> Option<usize> {
    let mut search = Search {
        prefix,
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
                let found = dl::sym(handle, name);
                libc::dlclose(handle);
                found
            };
            if found != 0 && !ours(found) {
                return Some(found);
            }
        }
    }
    // SAFETY: RTLD_NEXT searches the objects loaded after this one (the caller of the real
    // `dlsym` is this library).
    let next = unsafe { dl::sym(libc::RTLD_NEXT, name) };
    (next != 0 && !ours(next)).then_some(next)
}

/// Whether `address` lies in this library (never forward a call to ourselves).
pub fn ours(address: usize) -> bool {
    let base = |p: usize| {
        // SAFETY: Dl_info is plain data, filled by dladdr for any address.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables.
        (unsafe { libc::dladdr(p as *const c_void, &mut info) } != 0).then_some(info.dli_fbase)
    };
    let here = base(ours as fn(usize) -> bool as usize);
    here.is_some() && base(address) == here
}
