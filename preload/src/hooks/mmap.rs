//! Mapping hooks: `mmap`, `mmap64`, `munmap`, `mremap` forward to the system calls, then tell
//! `memory::mapped` what changed (anonymous mappings the program makes itself are counted
//! apart from the heap). glibc's own allocator maps through internal calls that never reach
//! these. The host's `errno` is the system call's.

use libc::{c_int, c_void, off_t, size_t};

use crate::memory::mapped;
use crate::{errno, local, real};

/// Whether this thread is inside mlprof (or inside Python's arena allocator called by our
/// wrapper): then the call is only forwarded.
#[inline]
fn inside() -> bool {
    local::with(|l| l.busy())
}

/// Interposed `mmap`.
///
/// # Safety
/// The C contract of `mmap`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    let p = unsafe { real::mmap(addr, len, prot, flags, fd, offset) };
    if p != libc::MAP_FAILED && !inside() {
        let _errno = errno::Saved::new();
        mapped::mapped(p as usize, len, prot, flags);
    }
    p
}

/// Interposed `mmap64` (the same call on 64-bit Linux).
///
/// # Safety
/// The C contract of `mmap`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { mmap(addr, len, prot, flags, fd, offset) }
}

/// Interposed `munmap`.
///
/// # Safety
/// The C contract of `munmap`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: forwarded caller contract.
    let r = unsafe { real::munmap(addr, len) };
    if r == 0 {
        crate::python::jit::unmapped(addr as usize, len);
    }
    if r == 0 && !inside() {
        let _errno = errno::Saved::new();
        mapped::unmapped(addr as usize, len);
    }
    r
}

/// Interposed `madvise`: allocators that keep their mappings give pages back this way.
///
/// # Safety
/// The C contract of `madvise`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: forwarded caller contract.
    let r = unsafe { real::madvise(addr, len, advice) };
    if r == 0 && !inside() {
        let _errno = errno::Saved::new();
        mapped::advised(addr as usize, len, advice);
    }
    r
}

/// Interposed `mremap`. C declares it variadic (`new_address` only with `MREMAP_FIXED`); on
/// the Linux calling conventions a variadic call passes it where a fifth argument goes, and it
/// is read only when the flags say it was passed.
///
/// # Safety
/// The C contract of `mremap`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let new_addr = if flags & libc::MREMAP_FIXED != 0 {
        new_addr
    } else {
        core::ptr::null_mut()
    };
    // SAFETY: forwarded caller contract.
    let p = unsafe { real::mremap(old, old_len, new_len, flags, new_addr) };
    if p != libc::MAP_FAILED && !inside() {
        let _errno = errno::Saved::new();
        if flags & libc::MREMAP_FIXED != 0 {
            mapped::unmapped(p as usize, new_len); // replaced whatever was there
        }
        mapped::remapped(old as usize, old_len, p as usize, new_len);
    }
    p
}
