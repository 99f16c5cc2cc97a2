//! Copy hooks: `memcpy`, `memmove`, `__memcpy_chk`, `mempcpy`. Each copies with glibc's own
//! (vectorised) routine, reached through a pointer resolved at load time, and counts the bytes
//! against this thread's copy-sampling countdown. Before the pointers are resolved (other
//! libraries' constructors run first), a byte loop of our own copies: calling `memcpy` from
//! here would call this hook again. Inlined copies and GPU copies never come through here.

use core::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_void, size_t};

use crate::local;
use crate::memory::sampler;

type Copy = unsafe extern "C" fn(*mut c_void, *const c_void, size_t) -> *mut c_void;

static MEMCPY: AtomicUsize = AtomicUsize::new(0);
static MEMMOVE: AtomicUsize = AtomicUsize::new(0);
static MEMPCPY: AtomicUsize = AtomicUsize::new(0);

/// Resolve glibc's copy routines (load time).
pub fn resolve() {
    for (slot, name) in [
        (&MEMCPY, c"memcpy"),
        (&MEMMOVE, c"memmove"),
        (&MEMPCPY, c"mempcpy"),
    ] {
        // SAFETY: dlsym with a valid C string, at load time.
        slot.store(
            unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize,
            Ordering::Release,
        );
    }
}

/// Count `n` copied bytes; sample the copy when due (never from inside mlprof itself).
#[inline]
fn counted(n: usize) {
    if !sampler::copy_sampling() {
        return;
    }
    local::with(|l| {
        let Some(_entered) = l.enter() else { return };
        if let Some(weight) = sampler::copy_due(l, n) {
            let gil = crate::python::runtime::holds_gil();
            sampler::record_copy(n, weight, sampler::reads(gil));
        }
    });
}

/// Copy with glibc's routine from `slot`, or byte by byte (overlap-safe) before it is known.
///
/// # Safety
/// The C contract of `memmove` for `dst`, `src`, `n`.
#[inline]
unsafe fn copy(slot: &AtomicUsize, dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    let f = slot.load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: `f` is glibc's memcpy/memmove/mempcpy (same signature); caller's contract.
        let f: Copy = unsafe { core::mem::transmute::<usize, Copy>(f) };
        // SAFETY: caller's contract.
        return unsafe { f(dst, src, n) };
    }
    let (d, s) = (dst as *mut u8, src as *const u8);
    // Volatile accesses keep the compiler from turning this loop back into a memcpy call.
    if (d as usize) < (s as usize) {
        for i in 0..n {
            // SAFETY: caller's contract: both ranges are valid for `n` bytes.
            unsafe { d.add(i).write_volatile(s.add(i).read_volatile()) };
        }
    } else {
        for i in (0..n).rev() {
            // SAFETY: as above.
            unsafe { d.add(i).write_volatile(s.add(i).read_volatile()) };
        }
    }
    dst
}

/// Interposed `memcpy`.
///
/// # Safety
/// The C contract of `memcpy`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    counted(n);
    // SAFETY: caller's contract.
    unsafe { copy(&MEMCPY, dst, src, n) }
}

/// Interposed `memmove`.
///
/// # Safety
/// The C contract of `memmove`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    counted(n);
    // SAFETY: caller's contract.
    unsafe { copy(&MEMMOVE, dst, src, n) }
}

/// Interposed `__memcpy_chk` (fortified builds): aborts on overflow like glibc's.
///
/// # Safety
/// The C contract of `__memcpy_chk`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __memcpy_chk(
    dst: *mut c_void,
    src: *const c_void,
    n: size_t,
    dst_len: size_t,
) -> *mut c_void {
    if n > dst_len {
        // SAFETY: glibc's fortify failure path; does not return.
        unsafe { libc::abort() }
    }
    // SAFETY: caller's contract.
    unsafe { memcpy(dst, src, n) }
}

/// Interposed `mempcpy` (returns the end of the destination).
///
/// # Safety
/// The C contract of `mempcpy`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mempcpy(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    counted(n);
    if MEMPCPY.load(Ordering::Acquire) != 0 {
        // SAFETY: caller's contract.
        return unsafe { copy(&MEMPCPY, dst, src, n) };
    }
    // SAFETY: caller's contract.
    unsafe { copy(&MEMMOVE, dst, src, n) };
    // SAFETY: within (one past) the destination range given by the caller.
    unsafe { (dst as *mut u8).add(n).cast() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_copy_handles_overlap_both_ways() {
        let mut buf: [u8; 8] = *b"abcdefgh";
        let p = buf.as_mut_ptr();
        let unresolved = AtomicUsize::new(0);
        // SAFETY: overlapping ranges inside `buf`.
        unsafe { copy(&unresolved, p.add(2).cast(), p.cast(), 4) };
        assert_eq!(&buf, b"ababcdgh");
        // SAFETY: as above, the other direction.
        unsafe { copy(&unresolved, p.cast(), p.add(3).cast(), 4) };
        assert_eq!(&buf, b"bcdgcdgh");
    }
}
