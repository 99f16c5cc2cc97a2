//! mlprof: a sampling profiler for Python machine-learning processes.
//!
//! Data flows one way, stage by stage; a module imports only earlier stages and the leaves
//! (`docs/ARCHITECTURE.md` has the table, `tests/layers.rs` checks it):
//! [`launch`] starts the target → the preload library (separate crate) writes wire records
//! into per-process channels → [`collect`] drains them and polls `/proc` into a
//! [`recording::Recording`] of raw facts → [`symbolize`] names native addresses →
//! [`model`] turns the recording into a [`model::Profile`] (pure) → [`annotate`] adds source
//! text → [`gate`] judges budgets → [`render`] prints it; [`cli`] wires the commands together.
//! Leaves used by all: [`error`], [`units`], [`sanitize`].

// Leaves.
pub mod error;
pub mod sanitize;
#[cfg(test)]
pub(crate) mod test_rng;
// Also for the end-to-end tests (`fixture::skipped`): not part of the library's use.
#[doc(hidden)]
pub mod test_skip;
pub mod units;

// Stages, in order.
pub mod annotate;
pub mod cli;
pub mod collect;
pub mod gate;
pub mod launch;
pub mod model;
pub mod pipeline;
pub mod recording;
pub mod render;
pub mod symbolize;

// Tests of the whole pipeline on fuzzed channel files and profiles.
#[cfg(test)]
mod fuzz_tests;
