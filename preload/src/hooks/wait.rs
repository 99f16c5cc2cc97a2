//! The blocking-wait hooks (`poll`, `ppoll`, `select`, `pselect`, `epoll_wait`,
//! `epoll_pwait`) are in C, `csrc/wait.c`: they are cancellation points, and a thread cancelled
//! while blocked in one is force-unwound through the hook's frame, which must not be Rust (this
//! library is built with panic = "abort"). When our own sampling signal interrupted the call
//! with EINTR, the hook makes it again with the time that was left. The deadline arithmetic
//! (`csrc/deadline.c`) is tested here.

#[cfg(test)]
mod tests {
    use libc::c_int;

    extern "C" {
        fn mlprof_deadline_ms(ms: c_int, now: u64) -> u64;
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
