//! The only raw reads of interpreter memory in the preload library: [`Direct`] loads, each
//! validated first (non-null, inside the user half of the address space, naturally aligned).
//! Callers read only their own thread's frames (from its own signal handler), whose memory the
//! interpreter keeps alive; the validation and the code-object type checks of the walker catch
//! torn or stale pointers. Runs inside signal handlers: no allocation, no locks.

use mlprof_pyframes::{plausible, Memory};

/// Direct loads from this process's memory.
pub struct Direct;

impl Memory for Direct {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        if !plausible(addr, out.len(), 1) {
            return None;
        }
        // SAFETY: validated range; the caller's contract (module doc) is that `addr` lies in a
        // live interpreter structure; the destination is a distinct writable buffer.
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
}
