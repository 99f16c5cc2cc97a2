//! The host's `errno` is the host's: whatever a hook or the signal handler does on its own
//! account (reading interpreter memory with `process_vm_readv`, maths in the sampling weight)
//! must leave it as the interposed call left it. [`Saved`] restores it when dropped.

/// `errno` as it was when saved; written back on drop.
pub struct Saved(libc::c_int);

impl Saved {
    /// Save the calling thread's `errno`.
    #[inline]
    pub fn new() -> Saved {
        // SAFETY: __errno_location returns this thread's errno slot.
        Saved(unsafe { *libc::__errno_location() })
    }
}

impl Drop for Saved {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = self.0 };
    }
}
