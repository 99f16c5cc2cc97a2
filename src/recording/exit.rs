//! How the direct child ended, as the kernel reported it: a fact of the run, reported by
//! `launch` (its waiter) and kept in the [`super::Recording`].

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
