//! Where a thread of another process is running, without stopping it: a perf software event
//! on the thread's own CPU clock (`PERF_COUNT_SW_TASK_CLOCK`) that records the user-space
//! instruction pointer every period of CPU time into a ring shared with us (`mlprof attach`).
//! The kernel allows it under the same rule as reading the process's memory, and only where
//! `kernel.perf_event_paranoid` permits user-space measurement (2 or less, or privileged).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Pages of sample data per thread (a power of two), after the control page: 16 KiB, about 680
/// samples, 340 ms of the thread's CPU between two drains. The rings count against the locked
/// memory perf allows a user (`kernel.perf_event_mlock_kb`), so that more threads get one.
const DATA_PAGES: usize = 4;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_SAMPLE_IP: u64 = 1;
const PERF_SAMPLE_TID: u64 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `perf_event_attr` as of `PERF_ATTR_SIZE_VER5`: the fields used are set by offset.
const ATTR_BYTES: usize = 112;
/// Bits of the flags word: `exclude_kernel`, `exclude_hv`.
const EXCLUDE_KERNEL_AND_HV: u64 = 1 << 5 | 1 << 6;
/// Offsets of `data_head` and `data_tail` in the control page.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

/// Why a thread's event could not be had: the `perf_event_open` call itself was refused, or the
/// ring it samples into could not be mapped (perf's locked-memory allowance was spent).
#[derive(Debug)]
pub enum OpenError {
    /// `perf_event_open` failed.
    Open(std::io::Error),
    /// `mmap` of the event's ring failed.
    Map(std::io::Error),
}

impl OpenError {
    /// The error number.
    pub fn errno(&self) -> Option<i32> {
        match self {
            OpenError::Open(e) | OpenError::Map(e) => e.raw_os_error(),
        }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Open(e) => write!(f, "perf_event_open: {e}"),
            OpenError::Map(e) => write!(f, "mapping its ring: {e}"),
        }
    }
}

/// The instruction pointers sampled on one thread.
pub struct ThreadIps {
    /// Kept open while sampling.
    _fd: OwnedFd,
    base: *mut u8,
    len: usize,
    page: usize,
}

// SAFETY: the mapping is owned by this value and only read and written through `&mut self`.
unsafe impl Send for ThreadIps {}

impl ThreadIps {
    /// Start sampling thread `tid` every `period_ns` of its CPU time.
    pub fn open(tid: u32, period_ns: u64) -> Result<ThreadIps, OpenError> {
        let mut attr = [0u8; ATTR_BYTES];
        let mut put = |at: usize, bytes: &[u8]| attr[at..at + bytes.len()].copy_from_slice(bytes);
        put(0, &PERF_TYPE_SOFTWARE.to_ne_bytes());
        put(4, &(ATTR_BYTES as u32).to_ne_bytes());
        put(8, &PERF_COUNT_SW_TASK_CLOCK.to_ne_bytes());
        put(16, &period_ns.max(1).to_ne_bytes());
        put(24, &(PERF_SAMPLE_IP | PERF_SAMPLE_TID).to_ne_bytes());
        put(40, &EXCLUDE_KERNEL_AND_HV.to_ne_bytes());
        // SAFETY: perf_event_open reads ATTR_BYTES bytes of `attr`, whose size field says so.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                tid as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(OpenError::Open(std::io::Error::last_os_error()));
        }
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (1 + DATA_PAGES);
        // SAFETY: a fresh shared mapping of the event's ring, as perf_event_open(2) describes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(OpenError::Map(std::io::Error::last_os_error()));
        }
        Ok(ThreadIps {
            _fd: fd,
            base: base as *mut u8,
            len,
            page,
        })
    }

    /// The instruction pointers recorded since the last call, oldest first.
    pub fn drain(&mut self, out: &mut Vec<u64>) {
        let size = (self.len - self.page) as u64;
        // SAFETY: the control page is mapped for the life of `self`; data_head is written by
        // the kernel (read it atomically, then fence before reading the data it covers).
        let head = unsafe { std::ptr::read_volatile(self.base.add(DATA_HEAD) as *const u64) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        // SAFETY: as above; data_tail is ours to write.
        let tail_ptr = unsafe { self.base.add(DATA_TAIL) as *mut u64 };
        // SAFETY: as above.
        let mut tail = unsafe { std::ptr::read_volatile(tail_ptr) };
        if head.wrapping_sub(tail) > size {
            tail = head; // the kernel overwrote what we had not read: start afresh
        }
        let data = self.page;
        let byte = |at: u64| -> u8 {
            // SAFETY: `at % size` is inside the data area, mapped for the life of `self`.
            unsafe { *self.base.add(data + (at % size) as usize) }
        };
        let word = |at: u64, n: usize| -> u64 {
            (0..n).fold(0u64, |w, i| w | (byte(at + i as u64) as u64) << (8 * i))
        };
        while tail < head {
            let kind = word(tail, 4) as u32;
            let record = word(tail + 6, 2);
            if record < 8 || tail + record > head {
                break;
            }
            if kind == PERF_RECORD_SAMPLE && record >= 8 + 16 {
                out.push(word(tail + 8, 8));
            }
            tail += record;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(tail_ptr, tail) };
    }
}

impl Drop for ThreadIps {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once; `base` is not used afterwards (the
        // descriptor closes after this, with `fd`).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our own thread, spinning in this function: its samples are at addresses of this binary.
    #[test]
    fn a_spinning_thread_is_sampled_where_it_runs() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let mut ips = match ThreadIps::open(tid, 1_000_000) {
            Ok(ips) => ips,
            Err(e) => {
                eprintln!("perf events not permitted here ({e}); nothing to check");
                return;
            }
        };
        // 100 ms of this thread's CPU time (not wall time: on a busy machine it gets a share).
        let cpu_ns = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec pointer; the thread CPU clock always exists on Linux.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        let start = cpu_ns();
        let mut x = 0u64;
        while cpu_ns() - start < 100_000_000 {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        let mut out = Vec::new();
        ips.drain(&mut out);
        assert!(
            out.len() >= 20,
            "{} samples in 100 ms of CPU at 1 ms",
            out.len()
        );
        let maps = crate::collect::procfs::read_maps(std::process::id()).unwrap();
        let ours = std::env::current_exe().unwrap();
        let in_test_binary = out
            .iter()
            .filter(|&&ip| {
                crate::recording::maps::find_mapping(&maps, ip)
                    .is_some_and(|m| std::path::Path::new(&m.path) == ours)
            })
            .count();
        assert!(
            in_test_binary * 10 >= out.len() * 8,
            "{in_test_binary} of {}",
            out.len()
        );
    }
}
