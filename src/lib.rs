//! mlprof: a sampling profiler for Python machine-learning processes.
//!
//! Data flows one way: the preload library (separate crate) writes wire records into
//! per-process channels → [`collect`] drains them and polls `/proc` into a [`collect::Recording`]
//! → [`model::attribute`] turns that into the [`model::Profile`] (pure) → [`render`] prints it.
//! [`launch`] starts the target; [`cli`] wires the commands together.

pub mod baseline;
pub mod budget;
pub mod budget_file;
pub mod budget_report;
pub mod cli;
pub mod collect;
pub mod error;
pub mod launch;
pub mod model;
pub mod render;
pub mod size;
pub mod symbolize;
#[cfg(test)]
pub(crate) mod test_rng;
