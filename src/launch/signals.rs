//! Signals sent to mlprof are passed on to the profiled command. Terminal-generated signals
//! (Ctrl-C) already reach the command through the process group, so those are not sent twice;
//! mlprof itself keeps running to write the report. Once the command is reaped, a signal ends
//! the wait for its descendants; a second terminating one, or one while the report is being
//! made, abandons the report: mlprof exits at once with the command's own exit status.
//!
//! One exception, only when asked for (`--snapshot-on-signal`): SIGUSR1 sent to mlprof is
//! then a request for a snapshot of the profile so far, and is not passed on. Without that
//! flag SIGUSR1 is forwarded like the others, so a program that uses it is never surprised;
//! with it, the program still gets every SIGUSR1 sent to it or to its process group directly.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use crate::recording::ChildExit;

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

/// The signal that asks for a snapshot when `--snapshot-on-signal` is given.
pub const SNAPSHOT_SIGNAL: libc::c_int = libc::SIGUSR1;

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
    /// SIGUSR1 asks mlprof for a snapshot instead of being forwarded (`--snapshot-on-signal`).
    /// Set before [`forward_signals`] starts.
    pub snapshot_on_signal: AtomicBool,
    /// A snapshot was asked for and not yet taken ([`Forwarding::take_snapshot_request`]).
    snapshot_asked: AtomicBool,
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
            snapshot_on_signal: AtomicBool::new(false),
            snapshot_asked: AtomicBool::new(false),
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

    /// Whether a snapshot was asked for (SIGUSR1 with `snapshot_on_signal`) since the last
    /// call.
    pub fn take_snapshot_request(&self) -> bool {
        self.snapshot_asked.swap(false, Ordering::AcqRel)
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
///
/// A signal sent to the whole process group (or cgroup: `timeout`, Slurm, systemd, `kill --
/// -PGID`) reaches the command as well as mlprof; it is forwarded only if the command's handler
/// did not receive it since mlprof last saw none pending ([`already_received`]), so the program
/// never gets one signal twice, even when mlprof takes it up late. `channels` is the session
/// directory.
pub fn forward_signals(pid: u32, channels: PathBuf, state: Arc<Forwarding>) {
    std::thread::spawn(move || {
        let set = forwarded_set();
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        // When the last wait that timed out began: none of the signals was pending until it
        // ended, so a signal taken up later was sent after that, however late this thread
        // gets to run (a loaded machine, a used-up CPU quota, a stopped mlprof). Not a wait
        // that ended with EINTR: a stop ends it so, and a signal may be sent while stopped.
        let mut quiet_ns = monotonic_ns();
        // When each signal was last taken up: one of the same number sent before that would
        // have been merged into it, so a later one was sent after.
        let mut taken_ns = [0u64; 65];
        while !state.stop.load(Ordering::Relaxed) {
            // SAFETY: siginfo_t is plain data filled by the kernel.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let began = monotonic_ns();
            // SAFETY: valid set, info and timeout pointers; the signals are blocked here.
            let sig = unsafe { libc::sigtimedwait(&set, &mut info, &timeout) };
            let now = monotonic_ns();
            if sig <= 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
                    quiet_ns = began;
                }
                continue; // timeout
            }
            let Some(taken) = usize::try_from(sig).ok().and_then(|i| taken_ns.get_mut(i)) else {
                continue;
            };
            let sent_after = quiet_ns.max(*taken);
            *taken = now;
            if sig == SNAPSHOT_SIGNAL && state.snapshot_on_signal.load(Ordering::Acquire) {
                // For mlprof itself, before or after the command ended: never forwarded,
                // never a reason to stop.
                state.snapshot_asked.store(true, Ordering::Release);
                continue;
            }
            if state.reaped.load(Ordering::Acquire) {
                state.after_reaped(sig);
                continue;
            }
            if info.si_code == libc::SI_KERNEL {
                continue; // a terminal signal the child already received
            }
            if already_received(&channels, pid, sig, sent_after, now) {
                continue;
            }
            // SAFETY: kill has no memory-safety preconditions. `pid` is our child and not yet
            // reaped: `reaped` is set by the collector before the pid could be reused... except
            // in the instant between the waiter's wait4 and that store, which is too short
            // for the kernel to hand the pid out again.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    });
}

/// How far apart the command's receipt and ours may be to be the same group-wide signal, and
/// how long mlprof waits for the command's handler to note it.
const SAME_SIGNAL_NS: u64 = 250_000_000;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether the command `pid` received `sig` itself since it was sent to mlprof: its handler
/// for `sig` (wrapped by the preload library), or its `sigwait` or `signalfd` read, noted a time
/// no earlier than `sent_after_ns` (less [`SAME_SIGNAL_NS`]), the last moment mlprof knows the
/// signal was not yet sent; waited for until `at_ns` (mlprof's own receipt) plus that. A command
/// that neither catches nor waits for `sig` is never waited for: a second delivery of a default
/// or ignored signal changes nothing.
fn already_received(
    channels: &Path,
    pid: u32,
    sig: libc::c_int,
    sent_after_ns: u64,
    at_ns: u64,
) -> bool {
    let Some(file) = newest_channel(channels, pid) else {
        return false;
    };
    let Ok(index) = usize::try_from(sig) else {
        return false;
    };
    if !(1..32).contains(&index) || !(catches(pid, sig) || waits_for(&file, index)) {
        return false;
    }
    let offset = std::mem::offset_of!(mlprof_wire::Header, signal_ns) + index * 8;
    let deadline = at_ns + SAME_SIGNAL_NS;
    loop {
        let mut word = [0u8; 8];
        // pread, not a mapping: a program that truncated its channel cannot make this fault.
        if file.read_exact_at(&mut word, offset as u64).is_err() {
            return false;
        }
        let noted = u64::from_le_bytes(word);
        if noted != 0 && noted.saturating_add(SAME_SIGNAL_NS) >= sent_after_ns.min(at_ns) {
            return true;
        }
        if monotonic_ns() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether `pid` has a handler for `sig` (`SigCgt` in `/proc/PID/status`).
fn catches(pid: u32, sig: libc::c_int) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0)
}

/// Whether the program takes signal `index` without a handler (`sigwait`, `signalfd`), as its
/// channel header says ([`mlprof_wire::Header::signals_waited`]). (`SigBlk` cannot say it:
/// while a thread waits in `sigtimedwait` the kernel unblocks the signals it waits for.)
fn waits_for(file: &std::fs::File, index: usize) -> bool {
    let offset = std::mem::offset_of!(mlprof_wire::Header, signals_waited);
    let mut word = [0u8; 8];
    file.read_exact_at(&mut word, offset as u64).is_ok()
        && u64::from_le_bytes(word) & (1u64 << (index - 1)) != 0
}

/// The newest channel file of `pid` (`PID.START_NS.ring`; a process that exec'd has several),
/// opened read-only, checked to be of this wire version.
fn newest_channel(dir: &Path, pid: u32) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let prefix = format!("{pid}.");
    let newest = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let start: u64 = name
                .strip_prefix(&prefix)?
                .strip_suffix(mlprof_wire::FILE_SUFFIX)?
                .parse()
                .ok()?;
            Some((start, e.path()))
        })
        .max()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(newest.1)
        .ok()?;
    let mut version = [0u8; 4];
    let at = std::mem::offset_of!(mlprof_wire::Header, version) as u64;
    file.read_exact_at(&mut version, at).ok()?;
    (u32::from_le_bytes(version) == mlprof_wire::VERSION).then_some(file)
}
