//! Where the process's CUPTI is: the one it already has loaded (PyTorch's CUDA libraries link
//! it), else the one that ships beside the CUDA runtime it loaded (the `nvidia-cuda-cupti`
//! wheel: `nvidia/cu13/lib/libcupti.so.13` beside `libcudart.so.13`, or
//! `nvidia/cuda_cupti/lib/libcupti.so.12` beside `nvidia/cuda_runtime/lib`; the toolkit's
//! `extras/CUPTI/lib64` beside `lib64`), else the loader's search path. Called once, from the
//! first launch's CUDA call (never a signal handler or an allocation hook).

use core::ffi::{c_char, c_void, CStr};

use super::real::{loaded_path, PATH_BYTES};

/// CUPTI's sonames, newest first.
const SONAMES: [&CStr; 2] = [c"libcupti.so.13", c"libcupti.so.12"];

/// Where CUPTI may be, relative to the directory of the loaded CUDA runtime.
const BESIDE_RUNTIME: [&[u8]; 4] = [
    b"/libcupti.so.13",
    b"/libcupti.so.12",
    b"/../../cuda_cupti/lib/libcupti.so.12",
    b"/../extras/CUPTI/lib64/libcupti.so",
];

/// A handle to CUPTI, loading it if the process has not (`None`: there is none to be found).
pub fn cupti() -> Option<*mut c_void> {
    for name in SONAMES {
        if let Some(h) = open(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) {
            return Some(h);
        }
    }
    if let Some(runtime) = loaded_path(b"libcudart.so") {
        let len = runtime.iter().position(|&b| b == 0).unwrap_or(0);
        let slash = runtime.iter().take(len).rposition(|&b| b == b'/');
        let dir = runtime.get(..slash.unwrap_or(0)).unwrap_or_default();
        for tail in BESIDE_RUNTIME {
            if dir.len() + tail.len() >= PATH_BYTES {
                continue;
            }
            let mut path = [0u8; PATH_BYTES];
            for (to, from) in path.iter_mut().zip(dir.iter().chain(tail.iter())) {
                *to = *from;
            }
            let p = path.as_ptr() as *const c_char;
            // SAFETY: a NUL-terminated path; `access` only asks the kernel.
            if unsafe { libc::access(p, libc::R_OK) } != 0 {
                continue;
            }
            if let Some(h) = open(p, libc::RTLD_NOW | libc::RTLD_LOCAL) {
                return Some(h);
            }
        }
    }
    // The loader's search path: the major version of the runtime loaded first.
    let twelve = loaded_path(b"libcudart.so.12").is_some();
    let order = if twelve {
        [SONAMES[1], SONAMES[0]]
    } else {
        SONAMES
    };
    order
        .iter()
        .find_map(|name| open(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL))
}

fn open(path: *const c_char, flags: libc::c_int) -> Option<*mut c_void> {
    // SAFETY: a NUL-terminated path; loading runs the library's constructors, as the program
    // loading it would (CUPTI's do not touch the program's state).
    let h = unsafe { libc::dlopen(path, flags) };
    (!h.is_null()).then_some(h)
}
