//! The only reads of interpreter memory in the preload library: [`Direct`] loads, each
//! validated first (non-null, inside the user half of the address space, naturally aligned),
//! then made with `process_vm_readv` on this very process, which fails with `EFAULT` instead
//! of crashing when the memory is gone. That happens: a sample can interrupt CPython 3.11+
//! inside `_PyThreadState_PopFrame` while it unmaps a data-stack chunk that the current frame
//! pointer still points into. Where the system call is not allowed (a seccomp filter), reads
//! fall back to plain loads guarded only by the validation and the walker's type checks.
//! Runs inside signal handlers: no allocation, no locks.

use core::sync::atomic::{AtomicI32, Ordering};

use mlprof_pyframes::{plausible, Memory};

/// This process's pid for `process_vm_readv` (0: not probed yet, -1: the call is refused).
static SELF_PID: AtomicI32 = AtomicI32::new(0);

/// Probe whether this process may read itself with `process_vm_readv` and remember its pid.
/// Called at load time and in a fork child (the pid changes).
pub fn init() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let probe: u64 = 0x6d6c_7072_6f66;
    let mut out: u64 = 0;
    SELF_PID.store(pid, Ordering::Relaxed);
    let ok = vm_read(
        &probe as *const u64 as usize,
        (&mut out as *mut u64).cast(),
        8,
    ) && out == probe;
    if !ok {
        SELF_PID.store(-1, Ordering::Relaxed);
    }
}

/// Copy `len` bytes at `addr` of this process into `out` with `process_vm_readv`; false if
/// any of it is not readable (or the call is refused).
fn vm_read(addr: usize, out: *mut u8, len: usize) -> bool {
    let pid = SELF_PID.load(Ordering::Relaxed);
    if pid <= 0 {
        return false;
    }
    let local = libc::iovec {
        iov_base: out.cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the system call writes at most `len` bytes into `out`, which the caller owns;
    // reading the remote range cannot fault in this process (the kernel checks it).
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    n == len as isize
}

/// Whether reads go through the kernel (false: plain loads).
fn checked() -> bool {
    SELF_PID.load(Ordering::Relaxed) > 0
}

/// Direct loads from this process's memory, each through the kernel: safe anywhere, including
/// a signal handler that interrupted CPython halfway through changing its frames. About one
/// system call (0.3-1 µs) per read.
pub struct Direct;

/// Plain loads, after the same validation as [`Direct`]: no system call. Only for the calling
/// thread's own Python stack at an allocation or copy point while it holds the GIL (as
/// `tracemalloc` walks it, inside the allocator, with the same fields) and the interpreter is
/// not finalizing: CPython then keeps the chain from the current frame consistent, and no
/// other thread can free it. Code objects on that chain are alive (each frame owns one).
/// Never in the signal handler.
pub struct Trusted;

impl Memory for Trusted {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        if !plausible(addr, out.len(), 1) {
            return None;
        }
        // SAFETY: validated range inside a live interpreter structure of this thread (the
        // type's contract); the destination is a distinct writable buffer.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Some(())
    }

    fn word(&self, addr: usize) -> Option<usize> {
        if !plausible(addr, 8, 8) {
            return None;
        }
        // SAFETY: as in `bytes`, aligned for a usize.
        Some(unsafe { core::ptr::read_volatile(addr as *const usize) })
    }

    fn int(&self, addr: usize) -> Option<i32> {
        if !plausible(addr, 4, 4) {
            return None;
        }
        // SAFETY: as in `bytes`, aligned for an i32.
        Some(unsafe { core::ptr::read_volatile(addr as *const i32) })
    }
}

impl Memory for Direct {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        if !plausible(addr, out.len(), 1) {
            return None;
        }
        if checked() {
            return vm_read(addr, out.as_mut_ptr(), out.len()).then_some(());
        }
        // SAFETY: validated range; without the checked read, the caller's contract (module
        // doc) is that `addr` lies in a live interpreter structure; the destination is a
        // distinct writable buffer.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Some(())
    }

    fn word(&self, addr: usize) -> Option<usize> {
        if !plausible(addr, 8, 8) {
            return None;
        }
        if checked() {
            let mut v: usize = 0;
            return vm_read(addr, (&mut v as *mut usize).cast(), 8).then_some(v);
        }
        // SAFETY: as in `bytes`, aligned for a usize.
        Some(unsafe { core::ptr::read_volatile(addr as *const usize) })
    }

    fn int(&self, addr: usize) -> Option<i32> {
        if !plausible(addr, 4, 4) {
            return None;
        }
        if checked() {
            let mut v: i32 = 0;
            return vm_read(addr, (&mut v as *mut i32).cast(), 4).then_some(v);
        }
        // SAFETY: as in `bytes`, aligned for an i32.
        Some(unsafe { core::ptr::read_volatile(addr as *const i32) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_valid_memory_and_refuses_bad_addresses() {
        let value: [usize; 2] = [0x12340, 0x5674];
        let base = value.as_ptr() as usize;
        assert_eq!(Direct.word(base + 8), Some(0x5674));
        assert_eq!(Direct.word(base + 1), None, "misaligned");
        assert_eq!(Direct.word(0), None);
        assert_eq!(Direct.word(usize::MAX - 3), None);
        assert_eq!(Direct.pointer(base), Some(0x12340));
        assert_eq!(
            Direct.pointer(base + 8),
            None,
            "0x5674 is not 8-byte aligned"
        );
        let mut out = [0u8; 2];
        assert_eq!(Direct.bytes(base, &mut out), Some(()));
        assert_eq!(out, [0x40, 0x23]);
    }

    #[test]
    fn reads_of_unmapped_memory_fail_instead_of_crashing() {
        init();
        assert!(checked(), "process_vm_readv on ourselves is allowed here");
        // SAFETY: mapping then unmapping one private page of our own.
        let page = unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            *(p as *mut usize) = 7;
            p
        };
        assert_eq!(Direct.word(page as usize), Some(7));
        // SAFETY: unmapping the page mapped above; nothing else refers to it.
        unsafe { libc::munmap(page, 4096) };
        assert_eq!(Direct.word(page as usize), None, "gone: no fault, no value");
    }
}
