//! The blocking-wait hooks (`poll`, `ppoll`, `select`, `pselect`, `epoll_wait`,
//! `epoll_pwait`, `nanosleep`, `clock_nanosleep`) are in C, `csrc/wait.c`: they are
//! cancellation points, and a thread cancelled while blocked in one is force-unwound through
//! the hook's frame, which must not be Rust (this library is built with panic = "abort"). When
//! our own sampling signal interrupted the call with EINTR, the hook makes it again with the
//! time that was left. A timeout the kernel refuses (`ppoll`'s or `pselect`'s timespec with a
//! negative part or a `tv_nsec` of 1e9 or more) is passed on unchanged, so that the call fails
//! with `EINVAL` at once as it does without mlprof, instead of being made into a deadline (the
//! sleeps' timespecs, `select`'s timeval and negative millisecond timeouts, "forever", are
//! passed on as they are anyway). The deadline arithmetic and that check (`csrc/deadline.c`)
//! are tested here.
//!
//! A wait that can block (a timeout that is not zero) is also timed, here: a Python thread
//! records its stack and the time the call kept it off the CPU as a waiting sample when the
//! call returns ([`mlprof_wait_end`]), exactly, where the collector's looks from outside can only
//! estimate it. While the thread is in such a wait its `waiting_since` word is set, and the
//! collector, which knows that word's address from the thread-start record, does not look at
//! it. `docs/design/waits.md` says why.

use mlprof_wire::{sample_flags, Record, Sample};

use crate::python::{runtime, stack};
use crate::{channel, clock, local, sampler};

/// Waits are sent once they add up to this much: a shorter one (a call whose descriptors were
/// ready, an event loop's brief waits) is carried into the thread's next timed wait, so that a
/// thread costs at most one stack walk per millisecond it waits, and no waiting time is lost.
const MIN_SENT_NS: u64 = 1_000_000;

/// Called by a C wait hook before a call that may block: returns the time the wait began
/// (CLOCK_MONOTONIC ns), or 0 when this wait is not timed: sampling off, no channel or the
/// collector gone, a thread without Python, or inside mlprof. A word left set (a wait left by
/// `longjmp` from a signal handler never ended) is simply set again: it is stale only until
/// the thread's next timed wait. (A timed wait inside a signal handler that interrupted
/// another shares the thread's word: rare, and costs the outer wait's CPU correction.)
#[no_mangle]
pub extern "C" fn mlprof_wait_begin() -> u64 {
    begin()
}

/// [`mlprof_wait_begin`], for the Rust hooks that time waits too (the GPU's, `crate::gpu`).
pub fn begin() -> u64 {
    if sampler::timer::mean_interval() == 0
        || channel::ring().is_none()
        || channel::collector_gone()
    {
        return 0;
    }
    let _errno = crate::errno::Saved::new();
    local::with(|l| {
        if l.busy() {
            return 0;
        }
        if l.gpu_waiting.get() != 0 {
            return 0; // inside a wait for the GPU, which times itself (the driver's own waits)
        }
        let Some(rt) = runtime::get() else { return 0 };
        if rt.this_thread_state() == 0 {
            return 0;
        }
        let now = clock::monotonic_ns().max(1);
        l.waiting_since.set(now);
        l.wait_cpu_ns.set(sampler::timer::thread_cpu_ns());
        now
    })
}

/// Called by a C wait hook after the call (whatever it returned) with what
/// [`mlprof_wait_begin`] gave: sends one waiting sample of the time the call kept the thread
/// off the CPU (its wall time less the CPU it used), with the thread's Python stack, adding the
/// short waits carried since the last one (when they all add up to less than [`MIN_SENT_NS`],
/// this one is carried too). errno is kept.
#[no_mangle]
pub extern "C" fn mlprof_wait_end(since: u64) {
    end(since, false);
}

/// [`mlprof_wait_end`]; `gpu`: the wait was for the GPU (a synchronising CUDA call): its sample
/// is flagged [`sample_flags::GPU_WAIT`], and its short waits are carried apart from the
/// others.
pub fn end(since: u64, gpu: bool) {
    if since == 0 {
        return;
    }
    let errno = crate::errno::Saved::new();
    local::with(|l| {
        // Inside mlprof first, so that a signal handler running a timed wait of its own in
        // between cannot start one over this one's clocks.
        let Some(_inside) = l.enter() else {
            l.waiting_since.set(0);
            return;
        };
        // Off the CPU: the call's wall time less the CPU it used (entering and leaving the
        // kernel, scanning descriptors), which the CPU sampler counts already.
        let ran = sampler::timer::thread_cpu_ns().saturating_sub(l.wait_cpu_ns.get());
        l.waiting_since.set(0);
        let (carried, kind) = if gpu {
            (
                &l.gpu_short_waits,
                sample_flags::WAITED | sample_flags::GPU_WAIT,
            )
        } else {
            (&l.short_waits, sample_flags::WAITED)
        };
        let waited = clock::monotonic_ns()
            .saturating_sub(since)
            .saturating_sub(ran)
            .saturating_add(carried.get());
        if waited < MIN_SENT_NS {
            carried.set(waited);
            return;
        }
        carried.set(0);
        stack::send(stack::Reads::Checked, |tid, ts_ns, stack| {
            let sample = Sample {
                ip: 0,
                weight_ns: waited,
                depth: stack.depth as u32,
                flags: stack.flags | kind,
                tstate: stack.tstate as u64,
                caller: 0,
                fault_share: 0,
            };
            Record::sample(tid, ts_ns, sample)
        });
    });
    drop(errno);
}

/// The address of the calling thread's `waiting_since` word, for its thread-start record.
pub fn waiting_cell() -> u64 {
    local::with(|l| l.waiting_since.as_ptr() as u64)
}

#[cfg(test)]
mod tests {
    use libc::c_int;

    extern "C" {
        fn mlprof_deadline_ms(ms: c_int, now: u64) -> u64;
        fn mlprof_timespec_valid(ts: *const libc::timespec) -> c_int;
        fn mlprof_deadline_ts(ts: *const libc::timespec, now: u64) -> u64;
        fn mlprof_remaining_ms(deadline: u64, now: u64) -> c_int;
        fn mlprof_remaining_ts(
            deadline: u64,
            now: u64,
            out: *mut libc::timespec,
        ) -> *const libc::timespec;
    }

    fn ts(sec: i64, nsec: i64) -> libc::timespec {
        libc::timespec {
            tv_sec: sec as libc::time_t,
            tv_nsec: nsec as libc::c_long,
        }
    }

    #[test]
    fn deadlines_count_down_and_forever_stays_forever() {
        // SAFETY: pure C functions over plain values and valid pointers.
        unsafe {
            let now = 1_000_000_000_000;
            assert_eq!(mlprof_remaining_ms(mlprof_deadline_ms(-1, now), now), -1);
            let d = mlprof_deadline_ms(50, now);
            assert_eq!(mlprof_remaining_ms(d, now), 50);
            assert_eq!(mlprof_remaining_ms(d, now + 49_500_000), 1); // rounded up
            assert_eq!(mlprof_remaining_ms(d, now + 60_000_000), 0); // past: 0, not negative
            let two = ts(2, 5);
            let d = mlprof_deadline_ts(&two, now);
            let mut out = ts(0, 0);
            let left = mlprof_remaining_ts(d, now + 1_000_000_000, &mut out);
            assert_eq!((*left).tv_sec, 1);
            assert_eq!((*left).tv_nsec, 5);
            assert!(
                mlprof_remaining_ts(mlprof_deadline_ts(core::ptr::null(), now), now, &mut out)
                    .is_null()
            );
        }
    }

    #[test]
    fn timespecs_the_kernel_refuses_are_told_apart_from_valid_ones() {
        let refused = [
            ts(-1, 0),
            ts(0, -1),
            ts(-1, -1),
            ts(0, 1_000_000_000),
            ts(0, 2_000_000_000),
            ts(0, i64::MAX), // LONG_MAX
            ts(i64::MIN, 0),
            ts(5, i64::MIN),
        ];
        let valid = [
            ts(0, 0),
            ts(0, 999_999_999),
            ts(1, 5),
            ts(i64::MAX, 0),
            ts(i64::MAX, 999_999_999),
        ];
        // SAFETY: a pure C function reading valid pointers (or null).
        unsafe {
            for t in &refused {
                assert_eq!(mlprof_timespec_valid(t), 0, "{} {}", t.tv_sec, t.tv_nsec);
            }
            for t in &valid {
                assert_eq!(mlprof_timespec_valid(t), 1, "{} {}", t.tv_sec, t.tv_nsec);
            }
            assert_eq!(mlprof_timespec_valid(core::ptr::null()), 1); // forever
        }
    }

    #[test]
    fn huge_timeouts_saturate_to_forever_instead_of_wrapping_into_the_past() {
        // SAFETY: pure C functions over plain values and valid pointers.
        unsafe {
            let now = 5_000_000_000_000;
            let mut out = ts(0, 0);
            for huge in [
                ts(i64::MAX, 0),
                ts(i64::MAX / 1_000_000_000 + 7, 999_999_999),
            ] {
                let d = mlprof_deadline_ts(&huge, now);
                // Forever, or at least as far away as the caller asked: never "already past".
                let left = mlprof_remaining_ts(d, now + 1, &mut out);
                assert!(left.is_null() || (*left).tv_sec > 1_000_000_000, "{d}");
            }
            assert_eq!(
                mlprof_remaining_ms(mlprof_deadline_ms(c_int::MAX, now), now),
                c_int::MAX
            );
            assert_eq!(
                mlprof_remaining_ms(mlprof_deadline_ms(c_int::MAX, u64::MAX - 5), u64::MAX - 5),
                -1
            );
        }
    }
}
