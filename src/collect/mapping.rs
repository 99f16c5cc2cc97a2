//! Read-write shared mappings of channel files (the collector advances each ring's tail).

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::Path;

use mlprof_wire::{Ring, WireError};

/// A mapped channel file; unmapped on drop.
pub struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all access goes through `Ring`, whose shared
// state is atomic.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map the whole file at `path`.
    pub fn open(path: &Path) -> std::io::Result<Mapping> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Err(std::io::Error::other("empty channel file"));
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: mapping `len` bytes of an open file of that size, shared, no fixed address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }

    /// The ring in this mapping, validated.
    pub fn ring(&self) -> Result<Ring<'_>, WireError> {
        // SAFETY: `base` is a live, page-aligned mapping of `len` readable and writable bytes
        // that outlives the returned view (borrowed from self); attach validates the contents.
        unsafe { Ring::attach(self.base, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped in `open`; no view outlives self.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
