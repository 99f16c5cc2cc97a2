//! The only raw reads of interpreter memory. Every read is validated first: non-null, inside
//! the user half of the address space, naturally aligned. Callers read only their own thread's
//! frames (from its own signal handler or hook), whose memory the interpreter keeps alive; the
//! validation and the code-object type checks in `walk` catch torn or stale pointers.
//! Runs inside signal handlers: no allocation, no locks.

const MIN_ADDR: usize = 0x1000;
const MAX_ADDR: usize = 0x0000_7fff_ffff_f000;

#[inline]
fn valid(addr: usize, size: usize, align: usize) -> bool {
    addr >= MIN_ADDR
        && addr.checked_add(size).is_some_and(|end| end <= MAX_ADDR)
        && addr.is_multiple_of(align)
}

/// A pointer-sized word at `addr`.
#[inline]
pub fn word(addr: usize) -> Option<usize> {
    if !valid(addr, 8, 8) {
        return None;
    }
    // SAFETY: validated range; the caller's contract (module doc) is that `addr` lies inside a
    // live interpreter structure of the current thread.
    Some(unsafe { core::ptr::read_volatile(addr as *const usize) })
}

/// A non-null pointer at `addr`, itself plausible as an object address.
#[inline]
pub fn pointer(addr: usize) -> Option<usize> {
    word(addr).filter(|&p| valid(p, 8, 8))
}

/// An `i32` at `addr`.
#[inline]
pub fn int(addr: usize) -> Option<i32> {
    if !valid(addr, 4, 4) {
        return None;
    }
    // SAFETY: as in `word`.
    Some(unsafe { core::ptr::read_volatile(addr as *const i32) })
}

/// A `u32` at `addr`.
#[inline]
pub fn uint(addr: usize) -> Option<u32> {
    int(addr).map(|v| v as u32)
}

/// A byte at `addr`.
#[inline]
pub fn byte(addr: usize) -> Option<u8> {
    if !valid(addr, 1, 1) {
        return None;
    }
    // SAFETY: as in `word`.
    Some(unsafe { core::ptr::read_volatile(addr as *const u8) })
}

/// Copy `out.len()` bytes starting at `addr`.
pub fn bytes(addr: usize, out: &mut [u8]) -> Option<()> {
    if !valid(addr, out.len(), 1) {
        return None;
    }
    // SAFETY: as in `word`; the destination is a distinct, writable buffer of that length.
    unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_valid_memory_and_refuses_bad_addresses() {
        let value: [usize; 2] = [0x12340, 0x5674];
        let base = value.as_ptr() as usize;
        assert_eq!(word(base + 8), Some(0x5674));
        assert_eq!(word(base + 1), None, "misaligned");
        assert_eq!(word(0), None);
        assert_eq!(word(usize::MAX - 3), None);
        assert_eq!(pointer(base), Some(0x12340));
        assert_eq!(pointer(base + 8), None, "0x5674 is not 8-byte aligned");
        let mut out = [0u8; 2];
        assert_eq!(bytes(base, &mut out), Some(()));
        assert_eq!(out, [0x40, 0x23]);
    }
}
