//! Signals sent to mlprof are passed on to the profiled command. Terminal-generated signals
//! (Ctrl-C) already reach the command through the process group, so those are not sent twice;
//! mlprof itself keeps running to write the report. Once the command is reaped, a signal ends
//! the wait for its descendants; a second terminating one, or one while the report is being
//! made, abandons the report: mlprof exits at once with the command's own exit status.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use super::ChildExit;

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

/// Signals that, once the command is reaped, ask mlprof itself to stop.
const TERMINATING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Where signal forwarding stands: shared by the forwarding thread, the collector and the
/// command line.
pub struct Forwarding {
    /// Stop the forwarding thread.
    pub stop: AtomicBool,
    /// The command has been reaped: its pid must not be signalled any more.
    pub reaped: AtomicBool,
    /// A forwarded signal arrived after the command was reaped (while mlprof waited for the
    /// descendants it left running): stop waiting.
    pub interrupted: AtomicBool,
    /// The waiting is over and the report is being made: a terminating signal now abandons it.
    pub reporting: AtomicBool,
    /// The command's exit status as mlprof's own (`128 + signal` when killed), once reaped;
    /// [`NO_STATUS`] before.
    exit_status: AtomicI32,
    /// Paths removed when the report is abandoned (the session directory).
    leftovers: Mutex<Vec<PathBuf>>,
}

/// [`Forwarding`]'s exit status before the command is reaped.
const NO_STATUS: i32 = -1;

impl Default for Forwarding {
    fn default() -> Forwarding {
        Forwarding {
            stop: AtomicBool::new(false),
            reaped: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            reporting: AtomicBool::new(false),
            exit_status: AtomicI32::new(NO_STATUS),
            leftovers: Mutex::new(Vec::new()),
        }
    }
}

impl Forwarding {
    /// Remove `path` (a directory) if the report is abandoned.
    pub fn remove_if_abandoned(&self, path: PathBuf) {
        if let Ok(mut paths) = self.leftovers.lock() {
            paths.push(path);
        }
    }

    /// A forwarded signal after the command was reaped: the first ends the wait for its
    /// descendants (the collector checks `interrupted`); a second terminating one, or one
    /// once the report is being made, abandons the report.
    fn after_reaped(&self, sig: libc::c_int) {
        let again = self.interrupted.swap(true, Ordering::AcqRel);
        if TERMINATING.contains(&sig) && (again || self.reporting.load(Ordering::Acquire)) {
            self.abandon(sig);
        }
    }

    /// Exit now, with the command's status (or `128 + sig` if it is somehow unknown), after one
    /// line saying so: whatever hangs in symbolizing or rendering is not waited for.
    fn abandon(&self, sig: libc::c_int) -> ! {
        if let Ok(paths) = self.leftovers.lock() {
            for path in paths.iter() {
                let _ = std::fs::remove_dir_all(path);
            }
        }
        const LINE: &[u8] = b"mlprof: interrupted after the program ended: report abandoned\n";
        // SAFETY: write(2) from a static buffer; raw, so no lock another thread may hold (the
        // report may be on its way to stderr) can block it.
        unsafe { libc::write(libc::STDERR_FILENO, LINE.as_ptr().cast(), LINE.len()) };
        let status = match self.exit_status.load(Ordering::Acquire) {
            NO_STATUS => 128 + sig,
            status => status,
        };
        // SAFETY: _exit ends the process without running destructors or atexit handlers while
        // other threads are mid-work (the stuck one included); nothing is left to flush.
        unsafe { libc::_exit(status) }
    }
}

/// mlprof's exit status for how the command ended: its code, or `128 + signal`.
pub fn exit_status(exit: &ChildExit) -> i32 {
    match (exit.code, exit.signal) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => crate::error::EXIT_ERROR,
    }
}

/// Pass the command's exit on from `exited`, noting it in `state` first (reaped, and the
/// status an abandoned report exits with).
pub fn watch_exit(exited: Receiver<ChildExit>, state: Arc<Forwarding>) -> Receiver<ChildExit> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok(exit) = exited.recv() {
            state
                .exit_status
                .store(exit_status(&exit), Ordering::Release);
            state.reaped.store(true, Ordering::Release);
            let _ = tx.send(exit);
        }
    });
    rx
}

/// Start a thread that passes forwarded signals on to `pid` until `state.stop` is set; once
/// the command is reaped, signals are for mlprof itself ([`Forwarding::after_reaped`]).
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
                state.after_reaped(sig);
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
