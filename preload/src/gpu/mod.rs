//! GPU work seen from the CUDA runtime calls the program makes: the memory each line makes the
//! process reserve on the device (and in pinned host memory), the copies between host and
//! device, the time threads wait for the GPU, and the kernels launched. The hooks
//! ([`hooks`]) are the runtime's exported functions; they find the runtime's own the first
//! time each is called ([`real`]) and tell the collector ([`send`]). A program that never
//! loads the CUDA runtime never calls them. See docs/design/gpu.md.

pub mod hooks;
pub mod real;
pub mod send;
