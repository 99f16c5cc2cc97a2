//! Reading CPython's frames, the same way from two places: the preload library reads its own
//! threads with direct loads inside a signal handler; the collector reads waiting threads of
//! another process with `process_vm_readv`. Both supply a [`Memory`]; the layouts (every
//! CPython build mlprof reads: [`layouts::ALL`]), the walk, the self-check of a layout read from
//! the interpreter and the code-object readers are shared.
//!
//! `no_std`, no allocation, no locks: this code runs inside signal handlers.
#![no_std]

pub mod check;
pub mod code;
#[allow(dead_code)] // the full table and its helpers are also read by tests and tools
pub mod layouts;
pub mod walk;

/// A way to read the target's memory. Every method returns `None` for memory that cannot be
/// read (unmapped, invalid, or refused by validation).
pub trait Memory {
    /// Copy `out.len()` bytes from `addr`.
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()>;

    /// A pointer-sized word at `addr`.
    fn word(&self, addr: usize) -> Option<usize> {
        let mut b = [0u8; 8];
        self.bytes(addr, &mut b)?;
        Some(usize::from_le_bytes(b))
    }

    /// An `i32` at `addr`.
    fn int(&self, addr: usize) -> Option<i32> {
        let mut b = [0u8; 4];
        self.bytes(addr, &mut b)?;
        Some(i32::from_le_bytes(b))
    }

    /// A byte at `addr`.
    fn byte(&self, addr: usize) -> Option<u8> {
        let mut b = [0u8; 1];
        self.bytes(addr, &mut b)?;
        Some(b[0])
    }

    /// A non-null, aligned pointer at `addr`.
    fn pointer(&self, addr: usize) -> Option<usize> {
        self.word(addr).filter(|&p| plausible(p, 8, 8))
    }
}

/// Whether `[addr, addr + size)` can be a user-space object with this alignment.
#[inline]
pub fn plausible(addr: usize, size: usize, align: usize) -> bool {
    const MIN_ADDR: usize = 0x1000;
    const MAX_ADDR: usize = 0x0000_7fff_ffff_f000;
    addr >= MIN_ADDR
        && addr.checked_add(size).is_some_and(|end| end <= MAX_ADDR)
        && addr.is_multiple_of(align)
}

/// The interpreter being read: its layout and the address of its `PyCode_Type`.
#[derive(Clone, Copy, Debug)]
pub struct Interpreter<'a> {
    /// Offsets for this build.
    pub layout: &'a layouts::Layout,
    /// Address of `PyCode_Type` in the target.
    pub code_type: usize,
}
