//! The only exported symbols of the preload library: the functions it interposes. Every
//! other item is private. In unit tests the symbols are not exported (`cfg(test)`), so the
//! test runner's own allocator is never interposed.
//!
//! Runs inside other people's processes, on any thread, before and after the interpreter
//! exists, inside signal handlers' callees: no allocation, no locks, no panics.

pub mod alloc;
pub mod copy;
pub mod exports;
pub mod mmap;
pub mod process;
pub mod signal;
pub mod thread;
pub mod wait;
