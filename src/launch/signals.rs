//! Signals sent to mlprof are passed on to the profiled command. Terminal-generated signals
//! (Ctrl-C) already reach the command through the process group, so those are not sent twice;
//! mlprof itself keeps running to write the report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
    }
    set
}

/// Block the forwarded signals in this thread and every thread it creates later. Call first
/// thing, before any thread exists. The child gets them unblocked ([`unblock_in_child`]).
pub fn block_forwarded_signals() {
    let set = forwarded_set();
    // SAFETY: a valid set; changing only this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Give the command the signal mask mlprof itself started with: empty for the forwarded
/// signals (a blocked mask is inherited across exec, and `Command` does not reset it).
pub fn unblock_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let set = forwarded_set();
    // SAFETY: the closure runs between fork and exec; it only calls pthread_sigmask, which is
    // async-signal-safe, on a set computed before the fork.
    unsafe {
        cmd.pre_exec(move || {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// Where signal forwarding stands: shared by the forwarding thread and the collector.
#[derive(Default)]
pub struct Forwarding {
    /// Stop the forwarding thread.
    pub stop: AtomicBool,
    /// The command has been reaped: its pid must not be signalled any more.
    pub reaped: AtomicBool,
    /// A forwarded signal arrived after the command was reaped (while mlprof waited for the
    /// descendants it left running): stop waiting.
    pub interrupted: AtomicBool,
}

/// Start a thread that passes forwarded signals on to `pid` until `state.stop` is set; once
/// the command is reaped, a signal ends mlprof's wait for its descendants instead.
pub fn forward_signals(pid: u32, state: Arc<Forwarding>) {
    std::thread::spawn(move || {
        let set = forwarded_set();
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        while !state.stop.load(Ordering::Relaxed) {
            // SAFETY: siginfo_t is plain data filled by the kernel.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: valid set, info and timeout pointers; the signals are blocked here.
            let sig = unsafe { libc::sigtimedwait(&set, &mut info, &timeout) };
            if sig <= 0 {
                continue; // timeout
            }
            if state.reaped.load(Ordering::Acquire) {
                state.interrupted.store(true, Ordering::Release);
                continue;
            }
            if info.si_code == libc::SI_KERNEL {
                continue; // a terminal signal the child already received
            }
            // SAFETY: kill has no memory-safety preconditions. `pid` is our child and not yet
            // reaped: `reaped` is set by the collector before the pid could be reused... except
            // in the instant between the waiter's wait4 and that store, which is too short
            // for the kernel to hand the pid out again.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    });
}
