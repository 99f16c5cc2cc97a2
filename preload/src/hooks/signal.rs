//! The program's handlers of the signals mlprof forwards are wrapped (`csrc/signal.c`, with
//! the `sigaction` hook) so that each receipt is noted in the channel header
//! ([`mlprof_wire::Header::signal_ns`]): the collector then forwards a signal only if the
//! program did not already get it from the same group-wide kill.

use core::sync::atomic::Ordering;

use crate::{channel, clock};

#[cfg(not(test))]
extern "C" {
    fn mlprof_signals_init(
        note: extern "C" fn(libc::c_int),
        sigprof: extern "C" fn(*const libc::sigaction, *mut libc::sigaction) -> libc::c_int,
    );
}

/// Start noting receipts, and keeping the program's SIGPROF disposition beside our handler
/// (load time, once the channel exists).
pub fn init() {
    #[cfg(not(test))]
    // SAFETY: a C function of this library; the callbacks are async-signal-safe and never
    // unwind.
    unsafe {
        mlprof_signals_init(note, crate::sampler::handler::program_sigprof)
    };
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
