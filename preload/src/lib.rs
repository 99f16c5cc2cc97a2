//! mlprof's LD_PRELOAD library, loaded into every profiled process. It counts the exact heap,
//! records the process's identity and exit, and streams events to the collector through a
//! shared-memory channel (see the `mlprof-wire` crate).
//!
//! Everything here runs inside other people's processes, in allocation hooks and (later)
//! signal handlers: no allocation, no locks, no panics (`panic = "abort"`), raw syscalls only.

mod channel;
mod clock;
mod heap;
mod hooks;
#[cfg_attr(test, allow(dead_code))] // runs only when loaded into a process
mod lifecycle;
mod real;
