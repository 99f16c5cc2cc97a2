//! Waiting for the profiled command with `wait4`, which also gives the kernel's exact CPU time
//! and peak RSS of the child and the descendants it waited for.

use std::process::Child;
use std::sync::mpsc::{channel, Receiver};

/// How the direct child ended, with its resource usage.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChildExit {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal number, if a signal killed it.
    pub signal: Option<i32>,
    /// Kernel resource usage.
    pub usage: Usage,
}

/// Kernel resource usage of a reaped child.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// User CPU seconds.
    pub user_s: f64,
    /// Kernel CPU seconds.
    pub kernel_s: f64,
    /// Peak resident set size in bytes.
    pub maxrss_bytes: u64,
}

/// Reap `child` on a thread of its own; its status arrives on the returned receiver.
pub fn spawn_waiter(child: Child) -> Receiver<ChildExit> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let pid = child.id() as libc::pid_t;
        let exit = wait4(pid);
        drop(child); // already reaped; dropping a Child neither waits nor kills
        let _ = tx.send(exit);
    });
    rx
}

fn wait4(pid: libc::pid_t) -> ChildExit {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data filled by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to locals; `pid` is our own unreaped child.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return ChildExit::default();
        }
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    let usage = Usage {
        user_s: secs(usage.ru_utime),
        kernel_s: secs(usage.ru_stime),
        maxrss_bytes: usage.ru_maxrss.max(0) as u64 * 1024,
    };
    if libc::WIFSIGNALED(status) {
        ChildExit {
            code: None,
            signal: Some(libc::WTERMSIG(status)),
            usage,
        }
    } else {
        ChildExit {
            code: Some(libc::WEXITSTATUS(status)),
            signal: None,
            usage,
        }
    }
}
