//! This process's channel to the collector: a shared-memory file `<pid>.<start_ns>.ring`
//! created 0600 in the private directory named by `MLPROF_DIR`. Created at load time and
//! again in a fork child (which must not write into its parent's channel). No allocation:
//! paths are built in stack buffers; only raw syscalls are used.

use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use mlprof_wire::{Header, Record, Ring};

static BASE: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
static LEN: AtomicUsize = AtomicUsize::new(0);

/// The attached channel, if any.
#[inline]
pub fn ring() -> Option<Ring<'static>> {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    // SAFETY: BASE/LEN describe a mapping created by `open` below that is never unmapped
    // while published here; attach validates the contents.
    unsafe { Ring::attach(base, LEN.load(Ordering::Relaxed)) }.ok()
}

/// Whether the collector has stopped reading this process's channel.
#[inline]
pub fn collector_gone() -> bool {
    ring().is_some_and(|r| r.header().collector_gone.load(Ordering::Relaxed) != 0)
}

/// Append a record to the channel (dropped silently if there is no channel).
#[inline]
pub fn send(record: &Record) {
    if let Some(ring) = ring() {
        ring.push(record);
    }
}

/// Stop using the channel (a fork child that is not followed): later records are dropped.
pub fn detach() {
    let old = BASE.swap(core::ptr::null_mut(), Ordering::AcqRel);
    let len = LEN.swap(0, Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: mapped by `open` with `len` bytes and no longer published; the fork child is
        // single-threaded at this point.
        unsafe { crate::real::munmap(old as *mut libc::c_void, len) };
    }
}

/// The Python status of the channel in use (a fork child copies its parent's before
/// replacing the channel).
pub fn previous_python_status() -> u32 {
    ring().map_or(0, |r| r.header().python_status.load(Ordering::Relaxed))
}

/// Create, map and initialise a new channel in `dir` (a NUL-terminated path), publish it,
/// and return its header. Replaces (and unmaps) any previous channel of this process image.
pub fn open(dir: &[u8], slots: u64, fill: impl FnOnce(&mut Header)) -> Option<&'static Header> {
    let pid = std::process::id();
    let start_ns = crate::clock::monotonic_ns();
    let mut path = PathBuf::new();
    path.push(dir.split(|&b| b == 0).next().unwrap_or(&[]));
    path.push(b"/");
    path.push_u64(pid as u64);
    path.push(b".");
    path.push_u64(start_ns);
    path.push(mlprof_wire::FILE_SUFFIX.as_bytes());
    let len = mlprof_wire::file_bytes(slots);
    let base = map_new_file(path.as_cstr()?, len)?;
    // SAFETY: `base` is a fresh, zero-filled, page-aligned shared mapping of `len` bytes that
    // no other thread knows about yet, and it is never unmapped while published.
    let ring = unsafe {
        Ring::init(base, len, slots, |h| {
            h.pid = pid;
            h.start_ns = start_ns;
            fill(h);
        })
    }?;
    let old = BASE.swap(base, Ordering::AcqRel);
    let old_len = LEN.swap(len, Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: `old` was mapped by this function with `old_len` bytes; it is no longer
        // published, and the only caller that replaces a channel is the fork child, which is
        // single-threaded at that point.
        unsafe { crate::real::munmap(old as *mut libc::c_void, old_len) };
    }
    Some(ring.header())
}

/// Give the file `len` bytes of real storage, not a sparse hole: a write to a page of a shared
/// mapping that the filesystem cannot back (a full TMPDIR) is a SIGBUS in the program. Where
/// `fallocate` is not supported, zeros are written. False if the space is not there: then
/// there is no channel, and the program runs unprofiled.
fn reserve(fd: libc::c_int, len: usize) -> bool {
    // SAFETY: `fd` is an open file we own; fallocate has no memory preconditions.
    let r = unsafe { libc::fallocate(fd, 0, 0, len as libc::off_t) };
    if r == 0 {
        return true;
    }
    // SAFETY: this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    if errno != libc::EOPNOTSUPP && errno != libc::ENOSYS {
        return false; // ENOSPC, EDQUOT, EFBIG...
    }
    let zeros = [0u8; 4096];
    let mut at = 0;
    while at < len {
        let n = zeros.len().min(len - at);
        // SAFETY: writing from a local buffer of at least `n` bytes to our own file.
        let w = unsafe { libc::pwrite(fd, zeros.as_ptr().cast(), n, at as libc::off_t) };
        if w <= 0 {
            return false;
        }
        at += w as usize;
    }
    true
}

/// Create `path` exclusively (0600), reserve its space, and map it shared. Raw syscalls only.
fn map_new_file(path: &core::ffi::CStr, len: usize) -> Option<*mut u8> {
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: `path` is a valid NUL-terminated string; open has no other preconditions.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return None;
    }
    let sized = reserve(fd, len);
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let addr = if sized {
        // SAFETY: mapping `len` bytes of a file we just gave `len` bytes; no fixed address.
        unsafe { crate::real::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) }
    } else {
        libc::MAP_FAILED
    };
    // SAFETY: closing our own descriptor; the mapping stays valid after close.
    unsafe { libc::close(fd) };
    if addr == libc::MAP_FAILED {
        // SAFETY: removing the file we created above.
        unsafe { libc::unlink(path.as_ptr()) };
        return None;
    }
    prefault(addr as *mut u8, len);
    Some(addr as *mut u8)
}

/// Make every page of the new mapping present and writable now, before the channel is
/// published. Otherwise the first record written to each page takes a page fault in the
/// program: 256 of them for the default ring, counted by the kernel as the program's and, in a
/// sample's page-fault share ([`crate::sampler::timer::fault_share`]), as kernel time of the
/// line that happened to run then (a pure-Python loop showed a third of its time as system on
/// a loaded machine). `MADV_POPULATE_WRITE` (Linux 5.14) does it in one call; elsewhere one
/// byte of each page is written (the file is all zeros, and nobody reads it yet).
fn prefault(base: *mut u8, len: usize) {
    // SAFETY: `base` is our own fresh mapping of `len` bytes; madvise only populates it.
    let r = unsafe { libc::madvise(base.cast(), len, libc::MADV_POPULATE_WRITE) };
    if r == 0 {
        return;
    }
    let mut at = 0;
    while at < len {
        // SAFETY: `at < len` lies inside the mapping, which only this thread knows about; it
        // holds zeros, and a zero is written back.
        unsafe { core::ptr::write_volatile(base.add(at), 0) };
        at += 4096;
    }
}

/// A fixed-size path buffer (no allocation).
struct PathBuf {
    buf: [u8; 512],
    len: usize,
    overflow: bool,
}

impl PathBuf {
    fn new() -> PathBuf {
        PathBuf {
            buf: [0; 512],
            len: 0,
            overflow: false,
        }
    }

    /// Append `bytes`; too long for the buffer (which keeps a byte for the NUL), nothing is
    /// appended and the path is refused.
    fn push(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        let room = self.buf.len() - 1;
        match self.buf.get_mut(self.len..end).filter(|_| end <= room) {
            Some(to) => {
                to.copy_from_slice(bytes);
                self.len = end;
            }
            None => self.overflow = true,
        }
    }

    fn push_u64(&mut self, mut n: u64) {
        let mut digits = [0u8; 20]; // u64::MAX has 20
        let mut first = digits.len();
        for (i, d) in digits.iter_mut().enumerate().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
            first = i;
            if n == 0 {
                break;
            }
        }
        self.push(digits.get(first..).unwrap_or_default());
    }

    fn as_cstr(&self) -> Option<&core::ffi::CStr> {
        if self.overflow {
            return None;
        }
        core::ffi::CStr::from_bytes_until_nul(self.buf.get(..=self.len)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::PathBuf;

    #[test]
    fn path_buffer_formats_numbers_and_refuses_overflow() {
        let mut p = PathBuf::new();
        p.push(b"/tmp/x/");
        p.push_u64(0);
        p.push(b".");
        p.push_u64(18446744073709551615);
        assert_eq!(
            p.as_cstr().unwrap().to_bytes(),
            b"/tmp/x/0.18446744073709551615"
        );
        p.push(&[b'a'; 600]);
        assert!(p.as_cstr().is_none());
        // 511 bytes and the NUL fill it; one more is refused.
        let mut p = PathBuf::new();
        p.push(&[b'a'; 510]);
        p.push(b"b");
        assert_eq!(p.as_cstr().unwrap().to_bytes().len(), 511);
        p.push(b"c");
        assert!(p.as_cstr().is_none());
    }
}
