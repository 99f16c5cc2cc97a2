//! Blocking waits that a signal interrupts with EINTR even under `SA_RESTART`: `poll`,
//! `ppoll`, `select`, `pselect`, `epoll_wait`, `epoll_pwait`. Native libraries often treat that
//! EINTR as an error, so when our own sampling signal (and only ours) interrupted the call, it
//! is made again with the time that was left. EINTR caused by anything else is returned as is.

use libc::c_int;

use crate::real;
use crate::sampler::handler;

/// Deadline arithmetic for a millisecond timeout (-1: forever).
struct Deadline(Option<u64>);

impl Deadline {
    fn from_ms(ms: c_int) -> Deadline {
        Deadline((ms >= 0).then(|| crate::clock::monotonic_ns() + ms as u64 * 1_000_000))
    }

    fn from_timespec(ts: *const libc::timespec) -> Deadline {
        if ts.is_null() {
            return Deadline(None);
        }
        // SAFETY: a non-null timeout pointer given by the caller of ppoll/pselect.
        let ts = unsafe { *ts };
        Deadline(Some(
            crate::clock::monotonic_ns()
                + ts.tv_sec.max(0) as u64 * 1_000_000_000
                + ts.tv_nsec.max(0) as u64,
        ))
    }

    fn remaining_ns(&self) -> Option<u64> {
        self.0
            .map(|d| d.saturating_sub(crate::clock::monotonic_ns()))
    }

    fn remaining_ms(&self) -> c_int {
        match self.remaining_ns() {
            None => -1,
            Some(ns) => ns.div_ceil(1_000_000).min(c_int::MAX as u64) as c_int,
        }
    }

    fn remaining_timespec(&self) -> Option<libc::timespec> {
        self.remaining_ns().map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        })
    }
}

/// Run `call` until it returns something other than an EINTR during which our signal arrived.
/// (A foreign signal arriving in the same call is indistinguishable; the window is the
/// syscall's entry, so the coincidence is rare, and Python itself retries EINTR anyway.)
fn retrying(mut call: impl FnMut() -> c_int) -> c_int {
    loop {
        let before = handler::signals_taken();
        let r = call();
        // SAFETY: reading this thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        if r == -1 && errno == libc::EINTR && handler::signals_taken() != before {
            continue;
        }
        return r;
    }
}

/// Interposed `poll`.
///
/// # Safety
/// The C contract of `poll`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    let Some(f) = real::waits() else { return -1 };
    let deadline = Deadline::from_ms(timeout);
    // SAFETY: forwarded caller contract.
    retrying(|| unsafe { (f.poll)(fds, n, deadline.remaining_ms()) })
}

/// Interposed `ppoll`.
///
/// # Safety
/// The C contract of `ppoll`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real::waits() else { return -1 };
    let deadline = Deadline::from_timespec(timeout);
    retrying(|| {
        let left = deadline.remaining_timespec();
        let ptr = left.as_ref().map_or(core::ptr::null(), |t| t as *const _);
        // SAFETY: forwarded caller contract; `ptr` is null or points to a local timespec.
        unsafe { (f.ppoll)(fds, n, ptr, mask) }
    })
}

/// Interposed `select` (Linux updates `timeout` with the time left, so a retry passes it on).
///
/// # Safety
/// The C contract of `select`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let Some(f) = real::waits() else { return -1 };
    // SAFETY: forwarded caller contract (on EINTR Linux leaves the sets unmodified).
    retrying(|| unsafe { (f.select)(n, r, w, e, timeout) })
}

/// Interposed `pselect`.
///
/// # Safety
/// The C contract of `pselect`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real::waits() else { return -1 };
    let deadline = Deadline::from_timespec(timeout);
    retrying(|| {
        let left = deadline.remaining_timespec();
        let ptr = left.as_ref().map_or(core::ptr::null(), |t| t as *const _);
        // SAFETY: forwarded caller contract; `ptr` is null or points to a local timespec.
        unsafe { (f.pselect)(n, r, w, e, ptr, mask) }
    })
}

/// Interposed `epoll_wait`.
///
/// # Safety
/// The C contract of `epoll_wait`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let Some(f) = real::waits() else { return -1 };
    let deadline = Deadline::from_ms(timeout);
    // SAFETY: forwarded caller contract.
    retrying(|| unsafe { (f.epoll_wait)(epfd, events, max, deadline.remaining_ms()) })
}

/// Interposed `epoll_pwait`.
///
/// # Safety
/// The C contract of `epoll_pwait`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real::waits() else { return -1 };
    let deadline = Deadline::from_ms(timeout);
    // SAFETY: forwarded caller contract.
    retrying(|| unsafe { (f.epoll_pwait)(epfd, events, max, deadline.remaining_ms(), mask) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_count_down_and_forever_stays_forever() {
        assert_eq!(Deadline::from_ms(-1).remaining_ms(), -1);
        assert!(Deadline::from_timespec(core::ptr::null())
            .remaining_timespec()
            .is_none());
        let d = Deadline::from_ms(50);
        let left = d.remaining_ms();
        assert!((1..=50).contains(&left), "{left}");
        let ts = libc::timespec {
            tv_sec: 2,
            tv_nsec: 5,
        };
        let left = Deadline::from_timespec(&ts).remaining_timespec().unwrap();
        assert!(left.tv_sec == 1 || left.tv_sec == 2);
    }
}
