//! mlprof's LD_PRELOAD library, loaded into every profiled process. It counts the exact heap,
//! samples CPU time with the Python stack, records the process's identity and exit, and
//! streams events to the collector through a shared-memory channel (`mlprof-wire`).
//!
//! Everything here runs inside other people's processes, in allocation hooks and signal
//! handlers: no allocation, no locks, no panics (`panic = "abort"`), raw syscalls only.

// In unit tests the hooks are not exported (so they never interpose on the test runner), which
// leaves what only they call unused there.
#![cfg_attr(test, allow(dead_code))]
// No panic path: a panic would abort the host program. The compiler refuses indexing, slicing
// and the panicking helpers outside tests; `get` with a mask into a fixed-size array costs
// nothing (the check is dropped), and a proven-in-range `get` is preferred to `unsafe`. No lint
// sees a `copy_from_slice` of unequal lengths (copy from a `get(..n)` of the destination's
// length, or zip). Arithmetic never panics here (no overflow checks in any profile of this
// crate), so `arithmetic_side_effects`, which flags every `+`, is not denied.
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::unreachable,
    clippy::todo,
    clippy::unimplemented
)]
#![cfg_attr(
    test,
    allow(
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable
    )
)]

mod channel;
mod clock;
mod errno;
mod gpu;
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
