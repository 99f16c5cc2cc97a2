//! What a process's CUDA runtime calls said (the preload library's CUDA hooks, decoded by
//! `collect`): every GPU allocation with its Python stack and the time it was given back,
//! copies and sampled kernel launches folded per thread, stack and kind. Few events (caching
//! allocators reserve in large segments), so they are kept whole, not sampled.

/// The CUDA calls of one process image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuCalls {
    /// Allocations (device, managed and pinned host memory), in arrival order.
    pub allocs: Vec<GpuAllocEvent>,
    /// Copies, folded per thread, stack and direction.
    pub copies: Vec<GpuCopyTotal>,
    /// Sampled kernel launches, folded per thread and stack.
    pub launches: Vec<GpuLaunchTotal>,
    /// Frees of addresses no recorded allocation held (given before the channel existed, or
    /// lost with a full ring).
    pub unmatched_frees: u64,
}

impl GpuCalls {
    /// Whether the process made any CUDA call we saw.
    pub fn is_empty(&self) -> bool {
        self.allocs.is_empty() && self.copies.is_empty() && self.launches.is_empty()
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
    /// Time of the last sample (ns from launch).
    pub last_ns: u64,
}
