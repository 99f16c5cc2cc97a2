//! The program's handlers of the signals mlprof forwards are wrapped (`csrc/signal.c`, with
//! the `sigaction` hook) so that each receipt is noted in the channel header
//! ([`mlprof_wire::Header::signal_ns`]): the collector then forwards a signal only if the
//! program did not already get it from the same group-wide kill. A program that takes them
//! with `sigwait` or a `signalfd` is noted the same way (`csrc/sigwait.c`), and never handed
//! mlprof's own SIGPROF.

use core::sync::atomic::Ordering;

use crate::{channel, clock};

#[cfg(not(test))]
extern "C" {
    fn mlprof_signals_init(
        note: extern "C" fn(libc::c_int),
        sigprof: extern "C" fn(*const libc::sigaction, *mut libc::sigaction) -> libc::c_int,
        masked: extern "C" fn(libc::c_int),
    );
    fn mlprof_sigprof_blocked() -> libc::c_int;
    fn mlprof_sigwait_init(
        sampling: extern "C" fn() -> libc::c_int,
        magic: usize,
        waits_for: extern "C" fn(u64),
    );
}

/// Start noting receipts, and keeping the program's SIGPROF disposition beside our handler
/// (load time, once the channel exists).
pub fn init() {
    #[cfg(not(test))]
    // SAFETY: a C function of this library; the callbacks are async-signal-safe and never
    // unwind.
    unsafe {
        mlprof_signals_init(
            note,
            crate::sampler::handler::program_sigprof,
            sigprof_masked,
        )
    };
    #[cfg(not(test))]
    // SAFETY: a C function of this library; the callback is async-signal-safe.
    unsafe {
        mlprof_sigwait_init(sampling, crate::sampler::timer::MAGIC, waits_for)
    };
}

/// The program takes the signals `bits` (bit `sig - 1`) without a handler (`sigwait`,
/// `signalfd`): published in the header for the collector. Async-signal-safe.
extern "C" fn waits_for(bits: u64) {
    if let Some(ring) = channel::ring() {
        ring.header()
            .signals_waited
            .fetch_or(bits, Ordering::Relaxed);
    }
}

/// Whether mlprof's CPU timers run (for `csrc/sigwait.c`). Async-signal-safe.
extern "C" fn sampling() -> libc::c_int {
    (crate::sampler::timer::mean_interval() != 0) as libc::c_int
}

/// The thread blocked SIGPROF (`blocked` = 1) or unblocked it (0) with `sigprocmask` or
/// `pthread_sigmask`: a change is sent to the collector, which says in the report which
/// threads' CPU went unsampled meanwhile. Async-signal-safe (a handler may change the mask).
extern "C" fn sigprof_masked(blocked: libc::c_int) {
    if crate::sampler::timer::mean_interval() == 0 {
        return;
    }
    // CPython's subprocess blocks every signal, vforks, and the child sets its own mask before
    // its exec: that is the child's, and the thread state it would change is its parent's
    // (whose span then never closed: every subprocess.run warned "blocked to its end").
    let Some(ring) = channel::ring() else { return };
    if crate::lifecycle::in_vfork_child(ring.header()) {
        return;
    }
    let blocked = blocked != 0;
    // Changed, and the CPU used while it was blocked (when it unblocks it). The thread's clock
    // is read, and the block's start kept, only on a change: setting the same mask again costs
    // nothing and does not restart the span.
    let changed = crate::local::with(|l| {
        let was = l.sigprof_blocked.replace(blocked as u64) != 0;
        if was == blocked {
            return None;
        }
        let now_cpu = crate::sampler::timer::thread_cpu_ns();
        let since = l
            .sigprof_block_cpu_ns
            .replace(if blocked { now_cpu } else { 0 });
        Some(if blocked {
            0
        } else {
            now_cpu.saturating_sub(since)
        })
    });
    if let Some(cpu_ns) = changed {
        let tid = clock::tid();
        channel::send(&mlprof_wire::Record::sigprof_mask(
            tid,
            clock::monotonic_ns(),
            blocked,
            cpu_ns,
        ));
    }
}

/// A thread starts (or a fork child's channel opens): a SIGPROF mask it inherited blocked is
/// sent as if it had just blocked it.
pub fn announce_mask() {
    #[cfg(not(test))]
    {
        // SAFETY: a C function of this library that only reads the thread's signal mask.
        let blocked = unsafe { mlprof_sigprof_blocked() } != 0;
        crate::local::with(|l| l.sigprof_blocked.set(0));
        if blocked {
            sigprof_masked(1);
        }
    }
}

/// A wrapped handler is about to run for `sig`: note the time. Async-signal-safe.
extern "C" fn note(sig: libc::c_int) {
    let Some(ring) = channel::ring() else { return };
    if let Some(slot) = usize::try_from(sig)
        .ok()
        .and_then(|i| ring.header().signal_ns.get(i))
    {
        slot.store(clock::monotonic_ns(), Ordering::Relaxed);
    }
}
