//! The profile model and the pure code that builds it from a recording. No I/O here.

pub mod attribute;
pub mod cpu;
pub mod diff;
pub mod filter;
pub mod gpu;
pub mod gpu_calls;
pub mod gpu_held;
pub mod gpu_kernels;
pub mod gpu_tensors;
pub mod idle;
pub mod invariants;
pub mod leaks;
pub mod memory;
pub mod merge;
pub mod native_kind;
pub mod places;
pub mod pooljoin;
pub mod profile;
pub mod ranks;
pub mod regions;
pub mod sections;
pub mod stacks;
pub mod sweep;
#[cfg(test)]
mod tests;
pub mod timeline;

pub use attribute::attribute;
pub use filter::Filter;
pub use profile::*;
pub use sections::{Amount, Budget, Hint, HintKind, Region, RegionLine, Violation};
