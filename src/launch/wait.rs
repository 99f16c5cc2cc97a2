//! Waiting for the profiled command with `wait4`, which also gives the kernel's exact CPU time
//! and peak RSS of the child and the descendants it waited for.

use std::process::Child;
use std::sync::mpsc::{channel, Receiver};

use crate::recording::{ChildExit, Usage};

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
