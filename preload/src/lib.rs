//! mlprof's LD_PRELOAD library, loaded into every profiled process. It counts the exact heap,
//! samples CPU time with the Python stack, records the process's identity and exit, and
//! streams events to the collector through a shared-memory channel (`mlprof-wire`).
//!
//! Everything here runs inside other people's processes, in allocation hooks and signal
//! handlers: no allocation, no locks, no panics (`panic = "abort"`), raw syscalls only.

// In unit tests the hooks are not exported (so they never interpose on the test runner), which
// leaves what only they call unused there.
#![cfg_attr(test, allow(dead_code))]

mod channel;
mod clock;
mod errno;
mod heap;
mod hooks;
mod lifecycle;
mod local;
mod marks;
mod memory;
mod peak;
mod python;
mod real;
mod sampler;
mod table;
