//! What PyTorch's CUDA allocator recorded of a process's tensors (its memory history, read in
//! the process at exit by the preload library's PyTorch hook and written to the run's directory; read back
//! by `collect::gpu_tensors`): the allocator's events per device, the blocks live at the end,
//! and the Python stacks of their allocations. See docs/design/gpu-tensors.md.

/// The trace of one process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorTrace {
    /// Its process id.
    pub pid: u32,
    /// How far it got.
    pub state: TraceState,
    /// PyTorch's version, as it says it.
    pub torch: String,
    /// The most allocator events its ring keeps (older ones are overwritten).
    pub entries: u64,
    /// Frames: (file, line, function name).
    pub frames: Vec<(String, u32, String)>,
    /// Stacks: frame indices, innermost first.
    pub stacks: Vec<Vec<u32>>,
    /// One per device the allocator used.
    pub devices: Vec<DeviceTrace>,
    /// Cut to a region (`model::regions`): blocks with no stack were allocated before the
    /// region began, not before the trace did.
    pub region: bool,
}

/// How far a process's trace got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TraceState {
    /// Switched on, never read out: the process ended without running its exit handlers
    /// (`os._exit`, a signal).
    #[default]
    Recording,
    /// Read out at exit.
    Done,
    /// PyTorch refused it, or reading it failed: why.
    Failed(String),
}

/// The allocator's trace of one device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceTrace {
    /// The CUDA device index.
    pub device: u32,
    /// Its events in order: the last `entries` the ring kept.
    pub events: Vec<TraceEvent>,
    /// Blocks allocated at the end: (address, bytes the tensor asked for, stack).
    pub live: Vec<(u64, u64, Option<u32>)>,
    /// Bytes the allocator held from CUDA at the end (its segments).
    pub reserved: u64,
    /// PyTorch's own count of the most bytes allocated at once (`max_memory_allocated`: blocks,
    /// rounded up), when it could be read.
    pub max_allocated: Option<u64>,
    /// PyTorch's own count of the most bytes tensors asked for at once
    /// (`requested_bytes.all.peak`: what the replay counts), when it could be read.
    pub max_requested: Option<u64>,
    /// Entries the ring held at the end, every action counted (0: not said).
    pub ring: u64,
}

/// One allocator event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// What happened.
    pub action: Action,
    /// The block's or segment's address (for an out-of-memory error: what CUDA still had free).
    pub addr: u64,
    /// Bytes the tensor asked for (a segment's size; for an out-of-memory error: what was
    /// asked for).
    pub size: u64,
    /// The allocation's stack (allocations and out-of-memory errors).
    pub stack: Option<u32>,
    /// When, in nanoseconds from launch (PyTorch's Unix-time stamp mapped to the run's clock),
    /// if known.
    pub t_ns: Option<u64>,
}

/// The allocator's actions that change what is allocated or reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A block handed to a tensor.
    Alloc,
    /// A block given back (and usable again).
    Free,
    /// A segment taken from CUDA.
    SegmentAlloc,
    /// A segment given back to CUDA.
    SegmentFree,
    /// An allocation that failed for want of memory.
    Oom,
}

impl TensorTrace {
    /// The frames of stack `stack`, innermost first (unknown indices left out).
    pub fn frames_of(&self, stack: u32) -> impl Iterator<Item = &(String, u32, String)> {
        self.stacks
            .get(stack as usize)
            .into_iter()
            .flatten()
            .filter_map(|&f| self.frames.get(f as usize))
    }
}
