//! What a process's CUDA runtime calls said (the preload library's CUDA hooks, decoded by
//! `collect`): every GPU allocation with its Python stack and the time it was given back,
//! copies and sampled kernel launches folded per thread, stack and kind, and per stretch of
//! the run between region boundaries (so that a region's cut takes exactly its own). Few
//! allocations (caching allocators reserve in large segments), so they are kept whole, not
//! sampled.

use super::Timed;

/// The CUDA calls of one process image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuCalls {
    /// Allocations (device, managed and pinned host memory), in arrival order.
    pub allocs: Vec<GpuAllocEvent>,
    /// Copies, folded per thread, stack, direction and stretch between region boundaries.
    pub copies: Vec<GpuCopyTotal>,
    /// Sampled kernel launches, folded per thread, stack and stretch.
    pub launches: Vec<GpuLaunchTotal>,
    /// Frees of addresses no recorded allocation held (given before the channel existed, or
    /// lost with a full ring).
    pub unmatched_frees: u64,
    /// What the GPU said of the kernels the launches ran (CUPTI; empty without it).
    pub kernels: super::GpuKernels,
}

impl GpuCalls {
    /// Whether the process made any CUDA call we saw.
    pub fn is_empty(&self) -> bool {
        self.allocs.is_empty()
            && self.copies.is_empty()
            && self.launches.is_empty()
            && self.kernels.is_empty()
            && self.kernels.state.is_none()
    }
}

/// One allocation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuAllocEvent {
    /// Nanoseconds from launch.
    pub t_ns: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// The address returned.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// The device (`None`: not known, or pinned host memory).
    pub device: Option<u32>,
    /// One of `mlprof_wire::gpu_space`.
    pub space: u8,
    /// Python frames, innermost first.
    pub frames: Vec<(u32, i32)>,
    /// When it was given back (ns from launch), if it was.
    pub freed_ns: Option<u64>,
}

/// Copies of one thread, stack and direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuCopyTotal {
    /// Kernel thread id.
    pub tid: u32,
    /// One of `mlprof_wire::gpu_copy`.
    pub direction: u8,
    /// Python frames, innermost first.
    pub frames: Vec<(u32, i32)>,
    /// Bytes copied.
    pub bytes: u64,
    /// Calls.
    pub calls: u64,
    /// Of those, calls that made the host wait (`cudaMemcpy`).
    pub synchronous_calls: u64,
    /// Time of the first one (ns from launch).
    pub first_ns: u64,
    /// Time of the last one (ns from launch).
    pub last_ns: u64,
}

/// Kernel launches of one thread and stack (sampled: each stands for its weight).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuLaunchTotal {
    /// Kernel thread id.
    pub tid: u32,
    /// Python frames, innermost first.
    pub frames: Vec<(u32, i32)>,
    /// Launches the samples stand for.
    pub launches: u64,
    /// Time of the first sample (ns from launch).
    pub first_ns: u64,
    /// Time of the last sample (ns from launch).
    pub last_ns: u64,
}

impl Timed for GpuAllocEvent {
    fn t_ns(&self) -> u64 {
        self.t_ns
    }
    /// Given back after `to`: not given back within the stretch.
    fn cut(&self, from: u64, to: u64) -> Self {
        GpuAllocEvent {
            t_ns: self.t_ns.saturating_sub(from),
            freed_ns: self
                .freed_ns
                .filter(|&f| f <= to)
                .map(|f| f.saturating_sub(from)),
            frames: self.frames.clone(),
            ..*self
        }
    }
}

/// A row of calls folded over a span of time, from its first call to its last: a stretch of
/// time cuts it whole or not at all ([`GpuFolded::within`]).
pub trait GpuFolded: Clone {
    /// Its first call (ns from launch).
    fn first_ns(&self) -> u64;
    /// Its last call.
    fn last_ns(&self) -> u64;
    /// A copy with both times counted from `from`.
    fn shifted(&self, from: u64) -> Self;
    /// Whether all its calls were made from `from` to `to` (inclusive).
    fn within(&self, from: u64, to: u64) -> bool {
        from <= self.first_ns() && self.last_ns() <= to
    }
}

impl GpuFolded for GpuCopyTotal {
    fn first_ns(&self) -> u64 {
        self.first_ns
    }
    fn last_ns(&self) -> u64 {
        self.last_ns
    }
    fn shifted(&self, from: u64) -> Self {
        GpuCopyTotal {
            first_ns: self.first_ns.saturating_sub(from),
            last_ns: self.last_ns.saturating_sub(from),
            ..self.clone()
        }
    }
}

impl GpuFolded for GpuLaunchTotal {
    fn first_ns(&self) -> u64 {
        self.first_ns
    }
    fn last_ns(&self) -> u64 {
        self.last_ns
    }
    fn shifted(&self, from: u64) -> Self {
        GpuLaunchTotal {
            first_ns: self.first_ns.saturating_sub(from),
            last_ns: self.last_ns.saturating_sub(from),
            ..self.clone()
        }
    }
}
