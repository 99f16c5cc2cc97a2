//! CPU sampling: per-thread CPU-time timers ([`timer`]) that raise SIGPROF in the thread that
//! burned the time, and the handler ([`handler`]) that records the instruction pointer and the
//! Python stack. Started at load time for the main thread; other threads are armed by the
//! `pthread_create` hook.

pub mod altstack;
pub mod caller;
pub mod handler;
pub mod timer;

/// Start sampling at `rate_hz` (0: off). Load time, single-threaded.
pub fn start(rate_hz: u64) -> u64 {
    if rate_hz == 0 || !handler::install() {
        return 0;
    }
    caller::init();
    let interval = 1_000_000_000 / rate_hz.clamp(1, u64::from(mlprof_wire::MAX_RATE_HZ));
    timer::set_mean_interval(interval);
    timer::arm_this_thread();
    interval
}
