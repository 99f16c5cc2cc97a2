//! Allocation hooks: forward to glibc, then account the block's usable size in the exact heap
//! counters. Sizes come from `malloc_usable_size`, so frees are exact without a side table.

use libc::{c_int, c_void, size_t};

use crate::{heap, memory, real};

#[inline]
fn allocated(ptr: *mut c_void) -> *mut c_void {
    if !ptr.is_null() {
        // SAFETY: `ptr` was just returned by glibc's allocator and is live.
        let size = unsafe { real::usable_size(ptr) };
        let now = heap::counters().add(size as u64);
        memory::allocated(ptr as usize, size, now, 0);
    }
    ptr
}

/// Interposed `malloc`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn malloc(size: size_t) -> *mut c_void {
    allocated(real::malloc(size))
}

/// Interposed `calloc`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    allocated(real::calloc(n, size))
}

/// Interposed `free`.
///
/// # Safety
/// `ptr` is null or a live block from this allocator (the C contract of `free`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    memory::freeing(ptr as usize); // before the address can be reused by another thread
                                   // SAFETY: the caller hands us a live block (C contract of free).
    heap::counters().sub(unsafe { real::usable_size(ptr) } as u64);
    // SAFETY: as above.
    unsafe { real::free(ptr) }
}

/// Interposed `realloc`.
///
/// # Safety
/// `ptr` is null or a live block from this allocator (the C contract of `realloc`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: size_t) -> *mut c_void {
    // SAFETY: the caller hands us null or a live block.
    let old = unsafe { real::usable_size(ptr) };
    if !ptr.is_null() {
        memory::freeing(ptr as usize); // a sampled block moves: it is a free and an allocation
    }
    // SAFETY: as above.
    let new = unsafe { real::realloc(ptr, size) };
    if new.is_null() {
        if size == 0 && !ptr.is_null() {
            heap::counters().sub(old as u64); // realloc(p, 0) freed p
        }
        return new;
    }
    heap::counters().sub(old as u64);
    allocated(new)
}

/// Interposed `reallocarray` (realloc with an overflow check on `n * size`).
///
/// # Safety
/// As `realloc`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded caller contract.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// Interposed `memalign`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    allocated(real::memalign(align, size))
}

/// Interposed `aligned_alloc`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    allocated(real::memalign(align, size))
}

/// Interposed `valloc`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn valloc(size: size_t) -> *mut c_void {
    allocated(real::valloc(size))
}

/// Interposed `pvalloc`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    allocated(real::pvalloc(size))
}

/// Interposed `posix_memalign`: the alignment must be a power of two multiple of
/// `sizeof(void *)`; errors are returned, not put in `errno`.
///
/// # Safety
/// `out` is a valid pointer to write the result to (C contract of `posix_memalign`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(core::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let ptr = real::memalign(align, size);
    if ptr.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable pointer (C contract).
    unsafe { *out = allocated(ptr) };
    0
}

fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = value };
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering;

    /// The one test that calls the hooks (they share the process-wide counters).
    #[test]
    fn every_hook_accounts_usable_sizes_exactly() {
        let c = heap::counters();
        let before = c.current.load(Ordering::Relaxed);
        let a = malloc(1000);
        let b = calloc(10, 100);
        let m = memalign(64, 200);
        let al = aligned_alloc(128, 256);
        let v = valloc(10);
        let pv = pvalloc(10);
        let mut p: *mut c_void = core::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        assert_eq!(unsafe { posix_memalign(&mut p, 3, 8) }, libc::EINVAL);
        // SAFETY: as above.
        assert_eq!(unsafe { posix_memalign(&mut p, 64, 100) }, 0);
        // SAFETY: `a` is live; growing it.
        let a = unsafe { realloc(a, 100_000) };
        // SAFETY: `b` is live; an overflowing count is refused and `b` stays live.
        assert!(unsafe { reallocarray(b, usize::MAX, 2) }.is_null());
        let live = [a, b, m, al, v, pv, p];
        // SAFETY: all blocks are live blocks of glibc's allocator.
        let expected: usize = live.iter().map(|&q| unsafe { real::usable_size(q) }).sum();
        assert_eq!(c.current.load(Ordering::Relaxed) - before, expected as i64);
        assert!(c.peak.load(Ordering::Relaxed) >= before + expected as i64);
        for q in live {
            // SAFETY: each block is live and freed once.
            unsafe { free(q) };
        }
        assert_eq!(c.current.load(Ordering::Relaxed), before);
    }
}
