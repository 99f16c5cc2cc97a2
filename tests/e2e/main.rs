//! End-to-end tests: real Python programs run under the real `mlprof` binary, with the profile
//! checked against ground truth known by construction. One test binary; `fixture` finds the
//! interpreters and runs things.

mod attach;
mod bounded;
mod budget;
mod busy;
mod children;
mod cpu;
mod diff;
mod export;
mod faults;
mod fixture;
mod foundation;
mod frameworks;
mod generated;
mod gpu;
mod gpu_calls;
mod gpu_driver;
mod gpu_growth;
mod gpu_kernels;
mod gpu_regions;
mod hints;
mod hostile;
mod html;
mod linetables;
mod mapped;
mod memory;
mod native_calls;
mod native_kinds;
mod notebook;
mod overhead;
mod pipeline;
mod preload_exports;
mod pytest_plugin;
mod pytest_signals;
mod ranks;
mod readme;
mod scale;
mod snapshot;
mod starvation;
mod sweep;
mod symbolize;
mod torch;
mod torch_stack;
mod usage;
mod width;
