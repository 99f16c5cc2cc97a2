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

/// The `mmap` system call (what glibc's `mmap` does on 64-bit Linux: it sets `errno` and
/// returns `MAP_FAILED` on failure). Ours rather than glibc's exported name, which our own hook
/// replaces.
///
/// # Safety
/// The C contract of `mmap` (a fixed address replaces whatever is mapped there).
#[inline]
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: forwarded caller contract; six integer arguments, as the system call takes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            addr as libc::c_long,
            len as libc::c_long,
            prot as libc::c_long,
            flags as libc::c_long,
            fd as libc::c_long,
            offset as libc::c_long,
        )
    };
    if r == -1 {
        libc::MAP_FAILED
    } else {
        r as *mut c_void
    }
}

/// The `munmap` system call.
///
/// # Safety
/// The C contract of `munmap` (nothing may use the range afterwards).
#[inline]
pub unsafe fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe { libc::syscall(libc::SYS_munmap, addr as libc::c_long, len as libc::c_long) as c_int }
}

/// The `madvise` system call (glibc's exported name is our hook).
///
/// # Safety
/// The C contract of `madvise`.
#[inline]
pub unsafe fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: forwarded caller contract; glibc's wrapper sets errno the same way.
    let r = unsafe {
        libc::syscall(
            libc::SYS_madvise,
            addr as libc::c_long,
            len as libc::c_long,
            advice as libc::c_long,
        )
    };
    r as c_int
}

/// The `mremap` system call (`new_addr` is read by the kernel only with `MREMAP_FIXED`).
///
/// # Safety
/// The C contract of `mremap`.
#[inline]
pub unsafe fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mremap,
            old as libc::c_long,
            old_len as libc::c_long,
            new_len as libc::c_long,
            flags as libc::c_long,
            new_addr as libc::c_long,
        )
    };
    if r == -1 {
        libc::MAP_FAILED
    } else {
        r as *mut c_void
    }
}

/// Terminate the process now, like `_exit` (no atexit handlers, no stdio flush).
pub fn exit_group(code: c_int) -> ! {
    // SAFETY: the exit_group syscall takes an int and does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, code as libc::c_long) };
    // SAFETY: unreachable in practice; abort if the kernel ever returned.
    unsafe { libc::abort() }
}

use core::sync::atomic::{AtomicUsize, Ordering};

type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut c_void,
) -> c_int;

/// A thread's start routine. "C-unwind": `pthread_exit` force-unwinds through it.
pub type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

static PTHREAD_CREATE: AtomicUsize = AtomicUsize::new(0);

/// Resolve the functions that need `dlsym(RTLD_NEXT)` (the thread functions, which have no
/// `__libc_` alias). Called at load time and again lazily if a hook runs first.
pub fn resolve() {
    // SAFETY: dlsym with valid C strings, outside any signal handler.
    unsafe {
        let create = libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) as usize;
        PTHREAD_CREATE.store(create, Ordering::Release);
    }
    #[cfg(not(test))]
    // SAFETY: a C function of this library with no preconditions (dlsym, outside any signal
    // handler).
    unsafe {
        mlprof_waits_resolve()
    };
}

#[cfg(not(test))]
extern "C" {
    /// Resolves the real blocking-wait functions for the hooks in `csrc/wait.c`.
    fn mlprof_waits_resolve();
}

/// The real `pthread_create`.
///
/// # Safety
/// The C contract of `pthread_create`.
pub unsafe fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    if PTHREAD_CREATE.load(Ordering::Acquire) == 0 {
        resolve();
    }
    let f = PTHREAD_CREATE.load(Ordering::Acquire);
    if f == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: `f` is libc's pthread_create, which has exactly this signature.
    let f: PthreadCreate = unsafe { core::mem::transmute(f) };
    // SAFETY: forwarded caller contract.
    unsafe { f(thread, attr, start, arg) }
}
