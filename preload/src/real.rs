//! The real allocator and process functions, reached without `dlsym` (which may itself
//! allocate): glibc exports its allocator under `__libc_*` names, and `_exit` is one syscall.
//! Runs inside allocation hooks: nothing here allocates or locks.

use libc::{c_int, c_void, size_t};

extern "C" {
    fn __libc_malloc(size: size_t) -> *mut c_void;
    fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: size_t) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
    fn __libc_valloc(size: size_t) -> *mut c_void;
    fn __libc_pvalloc(size: size_t) -> *mut c_void;
}

/// glibc `malloc`.
#[inline]
pub fn malloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator entry point; any size is valid input.
    unsafe { __libc_malloc(size) }
}

/// glibc `calloc`.
#[inline]
pub fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator entry point; it checks the multiplication itself.
    unsafe { __libc_calloc(n, size) }
}

/// glibc `realloc`.
///
/// # Safety
/// `ptr` is null or a live block from this allocator.
#[inline]
pub unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { __libc_realloc(ptr, size) }
}

/// glibc `free`.
///
/// # Safety
/// `ptr` is null or a live block from this allocator.
#[inline]
pub unsafe fn free(ptr: *mut c_void) {
    // SAFETY: forwarded caller contract.
    unsafe { __libc_free(ptr) }
}

/// glibc `memalign`.
#[inline]
pub fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc validates the alignment and returns NULL (EINVAL) if it is bad.
    unsafe { __libc_memalign(align, size) }
}

/// glibc `valloc`.
#[inline]
pub fn valloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator entry point.
    unsafe { __libc_valloc(size) }
}

/// glibc `pvalloc`.
#[inline]
pub fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator entry point.
    unsafe { __libc_pvalloc(size) }
}

/// Usable size of a block (what the allocator really reserved), 0 for NULL.
///
/// # Safety
/// `ptr` is null or a live block from this allocator.
#[inline]
pub unsafe fn usable_size(ptr: *mut c_void) -> usize {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: a live block from glibc's allocator; reads its chunk header only.
    unsafe { libc::malloc_usable_size(ptr) }
}

/// Terminate the process now, like `_exit` (no atexit handlers, no stdio flush).
pub fn exit_group(code: c_int) -> ! {
    // SAFETY: the exit_group syscall takes an int and does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, code as libc::c_long) };
    // SAFETY: unreachable in practice; abort if the kernel ever returned.
    unsafe { libc::abort() }
}
