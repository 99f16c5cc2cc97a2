//! The profile model and the pure code that builds it from a recording. No I/O here.

pub mod attribute;
pub mod invariants;
pub mod profile;
pub mod timeline;

pub use attribute::attribute;
pub use profile::*;
