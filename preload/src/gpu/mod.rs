//! GPU work seen from the CUDA calls the program makes: the memory each line makes the process
//! reserve on the device (and in pinned host memory), the copies between host and device, the
//! time threads wait for the GPU, and the kernels launched. The hooks are the runtime's
//! exported functions ([`hooks`]) and the driver's ([`driver`]), also handed out where a
//! program asks for a function rather than linking to it ([`entry`], [`dl`]); they find the
//! library's own the first time each is called ([`real`]) and tell the collector ([`send`]).
//! A program that never loads CUDA never calls them. See docs/design/gpu.md.

pub mod cupti;
pub mod dl;
pub mod driver;
pub mod entry;
pub mod hooks;
mod locate;
pub mod real;
pub mod seen;
pub mod send;
