//! Reading another process's memory with `process_vm_readv`: never faults (a bad address is an
//! error), needs ptrace access (we are the target's ancestor). Reads are served from 512-byte
//! blocks cached for the life of one [`Remote`], since a frame walk touches the same few
//! structures many times.

use std::cell::RefCell;
use std::collections::HashMap;

use mlprof_pyframes::Memory;

const BLOCK: usize = 512;

/// One process's memory, read from outside.
pub struct Remote {
    pid: libc::pid_t,
    blocks: RefCell<HashMap<usize, Option<Box<[u8; BLOCK]>>>>,
}

impl Remote {
    /// Reader for `pid`; create a new one for each consistent snapshot.
    pub fn new(pid: u32) -> Remote {
        Remote {
            pid: pid as libc::pid_t,
            blocks: RefCell::new(HashMap::new()),
        }
    }

    fn read_raw(&self, addr: usize, out: &mut [u8]) -> bool {
        self.read_uncached(addr, out).is_ok()
    }

    /// Read `out.len()` bytes at `addr` past the cache, with the kernel's reason when it
    /// refuses (`EPERM`: not permitted; `ESRCH`: gone).
    pub fn read_uncached(&self, addr: usize, out: &mut [u8]) -> std::io::Result<()> {
        let local = libc::iovec {
            iov_base: out.as_mut_ptr().cast(),
            iov_len: out.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: out.len(),
        };
        // SAFETY: one local iovec over `out` (writable, of that length) and one remote iovec;
        // the kernel validates the remote range and returns an error instead of faulting.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n == out.len() as isize => Ok(()),
            n if n < 0 => Err(std::io::Error::last_os_error()),
            _ => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
        }
    }

    fn block(&self, start: usize) -> Option<[u8; BLOCK]> {
        let mut blocks = self.blocks.borrow_mut();
        let entry = blocks.entry(start).or_insert_with(|| {
            let mut buf = Box::new([0u8; BLOCK]);
            self.read_raw(start, &mut buf[..]).then_some(buf)
        });
        entry.as_deref().copied()
    }
}

impl Memory for Remote {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        if !mlprof_pyframes::plausible(addr, out.len(), 1) {
            return None;
        }
        let start = addr - addr % BLOCK;
        if addr + out.len() <= start + BLOCK {
            let block = self.block(start)?;
            out.copy_from_slice(&block[addr - start..addr - start + out.len()]);
            return Some(());
        }
        self.read_raw(addr, out).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_unmapped() {
        let data: Vec<u64> = (0..200).collect();
        let me = Remote::new(std::process::id());
        let base = data.as_ptr() as usize;
        assert_eq!(me.word(base + 8 * 150), Some(150));
        assert_eq!(me.word(base + 8 * 3), Some(3));
        let mut big = [0u8; 1200];
        assert!(me.bytes(base, &mut big).is_some());
        assert_eq!(big[8 * 100], 100);
        assert_eq!(
            me.word(0x1000),
            None,
            "unmapped page reads as None, no fault"
        );
    }
}
