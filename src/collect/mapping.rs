//! Read-write shared mappings of channel files (the collector advances each ring's tail).
//!
//! A channel file is untrusted: it lives in a directory the profiled program can write, and
//! the program can put anything there or change it at any time. It is opened without following
//! links and without blocking, must be a regular file, is mapped at most as large as the
//! largest valid channel, and is registered with [`sigbus`](super::sigbus) so that a file
//! truncated under the mapping reads as zeros instead of killing the collector.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use mlprof_wire::{Header, Ring, WireError, MAX_SLOTS};

use super::sigbus::{self, Registration};

/// Why a file could not be mapped as a channel.
#[derive(Debug)]
pub enum OpenError {
    /// Empty, or shorter than a channel header: perhaps a process is creating it right now;
    /// look again later.
    Unready(&'static str),
    /// Not usable now or later (not a regular file, cannot be opened, cannot be mapped).
    Refused(String),
}

/// A mapped channel file; unmapped on drop.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    path: PathBuf,
    /// Identity of the file that was mapped (device, inode).
    identity: (u64, u64),
    /// `Some` until dropped (unregistered before the unmapping).
    registration: Option<Registration>,
}

// SAFETY: the mapping is plain shared memory; all access goes through `Ring`, whose shared
// state is atomic.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map the file at `path` (at most as many bytes as the largest valid channel).
    pub fn open(path: &Path) -> Result<Mapping, OpenError> {
        let refused = |e: std::io::Error| OpenError::Refused(e.to_string());
        // No symbolic links; no blocking on a FIFO; not inherited by the command's processes.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(refused)?;
        let meta = file.metadata().map_err(refused)?;
        if !meta.file_type().is_file() {
            return Err(OpenError::Refused("not a regular file".into()));
        }
        if meta.len() == 0 {
            return Err(OpenError::Unready("empty"));
        }
        if meta.len() < std::mem::size_of::<Header>() as u64 {
            return Err(OpenError::Unready("shorter than a channel header"));
        }
        let len = usize::try_from(meta.len())
            .unwrap_or(usize::MAX)
            .min(mlprof_wire::file_bytes(MAX_SLOTS));
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: mapping `len` bytes (no more than the file's size) of an open regular file,
        // shared, at no fixed address.
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
            return Err(refused(std::io::Error::last_os_error()));
        }
        let base: *mut u8 = base.cast();
        Ok(Mapping {
            base,
            len,
            path: path.to_path_buf(),
            identity: (meta.dev(), meta.ino()),
            registration: Some(sigbus::register(base, len)),
        })
    }

    /// The ring in this mapping, validated.
    pub fn ring(&self) -> Result<Ring<'_>, WireError> {
        // SAFETY: `base` is a live, page-aligned mapping of `len` readable and writable bytes
        // that outlives the returned view (borrowed from self); attach validates the contents.
        // A read past the end of a file that shrank is turned into zeros by `sigbus`.
        unsafe { Ring::attach(self.base, self.len) }
    }

    /// Why the mapping no longer reflects the file, if it does not: the file shrank below the
    /// mapped length (seen by `stat`, or by a read that faulted and now reads zeros).
    pub fn damage(&self) -> Option<String> {
        if let Some(why) = self.fault() {
            return Some(why);
        }
        let meta = std::fs::symlink_metadata(&self.path).ok()?;
        // A file replaced by another (or removed) leaves our mapping of the old one intact.
        if (meta.dev(), meta.ino()) == self.identity && meta.len() < self.len as u64 {
            return Some(format!(
                "the channel file was truncated to {} of its {} bytes",
                meta.len(),
                self.len
            ));
        }
        None
    }
}

impl Mapping {
    /// Why the mapping no longer reads the file, if a read faulted (the file was truncated
    /// under it, which the kernel makes fault at the next touch of a page cut off): no system
    /// call, so cheap enough after every drain.
    pub fn fault(&self) -> Option<String> {
        self.registration
            .as_ref()
            .is_some_and(Registration::faulted)
            .then(|| "the channel file was truncated while being read".into())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        self.registration = None; // unregistered first: the range is about to be reused
                                  // SAFETY: unmapping exactly the region mapped in `open`; no view outlives self.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mlprof-mapping-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A valid channel file of `slots` slots.
    pub fn channel_file(path: &Path, slots: u64) {
        let len = mlprof_wire::file_bytes(slots);
        let mut image = vec![0u64; len.div_ceil(8) + 8];
        let base = image.as_mut_ptr() as *mut u8;
        let aligned = base.wrapping_add(base.align_offset(64));
        // SAFETY: `aligned..aligned + len` is inside the zeroed, exclusively owned buffer.
        unsafe { Ring::init(aligned, len, slots, |h| h.pid = 4242) }.unwrap();
        // SAFETY: the same initialised bytes.
        let bytes = unsafe { std::slice::from_raw_parts(aligned, len) };
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn refuses_links_fifos_and_directories_without_blocking() {
        let d = dir("kinds");
        let real = d.join("real.ring");
        channel_file(&real, 8);
        assert!(Mapping::open(&real).unwrap().ring().is_ok());
        let link = d.join("link.ring");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(Mapping::open(&link), Err(OpenError::Refused(_))));
        let fifo = d.join("fifo.ring");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(Mapping::open(&fifo), Err(OpenError::Refused(_))));
        let sub = d.join("dir.ring");
        std::fs::create_dir(&sub).unwrap();
        assert!(matches!(Mapping::open(&sub), Err(OpenError::Refused(_))));
        let empty = d.join("empty.ring");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(Mapping::open(&empty), Err(OpenError::Unready(_))));
        std::fs::write(&empty, b"MLPROFw").unwrap();
        assert!(matches!(Mapping::open(&empty), Err(OpenError::Unready(_))));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn truncation_is_seen_by_stat_and_by_a_faulting_read() {
        let d = dir("trunc");
        let path = d.join("1.2.ring");
        channel_file(&path, 1024);
        let m = Mapping::open(&path).unwrap();
        assert!(m.ring().is_ok() && m.damage().is_none());
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(m.len as u64 / 2).unwrap();
        assert!(m.damage().unwrap().contains("truncated to"));
        file.set_len(0).unwrap();
        // Reading the header now faults; the handler maps zeros: not a channel any more.
        assert_eq!(m.ring().err(), Some(WireError::NotReady));
        assert!(m.damage().unwrap().contains("while being read"));
        drop(m);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn huge_slot_count_in_header_is_refused() {
        let d = dir("slots");
        let path = d.join("1.2.ring");
        channel_file(&path, 8);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = std::mem::offset_of!(Header, slots);
        // 2^58 slots: 2^64 bytes, which wraps to 0 in an unchecked size computation.
        bytes[at..at + 8].copy_from_slice(&(1u64 << 58).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let m = Mapping::open(&path).unwrap();
        assert_eq!(m.ring().err(), Some(WireError::BadLayout));
        let _ = std::fs::remove_dir_all(&d);
    }
}
