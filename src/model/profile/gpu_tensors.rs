//! The profile's account of PyTorch's tensors on the GPU (`docs/design/gpu-tensors.md`): what
//! each process's CUDA allocator held at its peak, by the lines that allocated it, the cache
//! slack beside it, and the lines holding memory when an allocation failed. Types only;
//! `model::gpu_tensors` fills them.

use serde::{Deserialize, Serialize};

/// A process's tensors on its GPUs, by its allocator's trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessTensors {
    /// `on` (replayed), `unread` (switched on, never read out: the process ended without its
    /// exit handlers) or `failed` (PyTorch refused the trace, or reading it failed).
    pub state: String,
    /// Why the figures are missing or partial, in words (empty when they are whole).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// PyTorch's version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub torch: String,
    /// One per device the allocator used.
    pub devices: Vec<DeviceTensors>,
    /// On a region's page: the trace cut to the region, so `before_trace_bytes` is what was
    /// allocated before the region began.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cut_to_region: bool,
}

/// One device's tensors at its allocator's peak.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceTensors {
    /// The CUDA device index.
    pub device: u32,
    /// The most bytes of tensors allocated at once, within the trace: the bytes the tensors
    /// asked for (PyTorch's `requested_bytes`; its `memory_allocated` counts each block
    /// rounded up, to 512 bytes at least).
    pub peak_allocated_bytes: u64,
    /// Seconds from launch when it was first reached, when PyTorch's clock could be mapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_s: Option<f64>,
    /// What the allocator held from CUDA at that moment.
    pub reserved_at_peak_bytes: u64,
    /// Of it, reserved but holding no tensor: the cache's slack.
    pub cache_slack_bytes: u64,
    /// Of the peak, blocks allocated before the trace's first event (no stack known).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub before_trace_bytes: u64,
    /// PyTorch's own count of the most allocated at once (`max_memory_allocated`), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_max_allocated_bytes: Option<u64>,
    /// PyTorch's own count of the most bytes tensors asked for at once
    /// (`requested_bytes.all.peak`, what `peak_allocated_bytes` counts), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_max_requested_bytes: Option<u64>,
    /// Allocator events replayed.
    pub events: u64,
    /// The lines holding most of the peak, most first (at most 10).
    pub top: Vec<TensorLine>,
    /// Lines whose tensors live on the device never fell and rose at at least half of
    /// [`GROWTH_POINTS`] evenly spaced moments up to the peak, at least doubling from the moment
    /// a third of the way there: their memory piles up (most first, at most 10; `bytes` at the
    /// peak).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub growing: Vec<TensorLine>,
    /// The last allocation that failed for want of memory, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<TensorOom>,
}

/// A line's tensors live at a moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorLine {
    /// Source file.
    pub file: String,
    /// Line.
    pub line: u32,
    /// Function.
    pub function: String,
    /// Bytes of its tensors live then.
    pub bytes: u64,
    /// Blocks.
    pub blocks: u64,
}

/// An allocation that failed: what was asked, what was held, and by which lines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorOom {
    /// Bytes asked for.
    pub requested_bytes: u64,
    /// Seconds from launch, when PyTorch's clock could be mapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_s: Option<f64>,
    /// What CUDA still had free, by PyTorch's account.
    pub device_free_bytes: u64,
    /// Bytes of tensors allocated then.
    pub allocated_bytes: u64,
    /// The line that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<TensorLine>,
    /// The lines holding most then, most first (at most 10).
    pub top: Vec<TensorLine>,
}

/// Moments of the trace, up to the peak, at which each line's live tensors are counted to tell
/// growing ones.
pub const GROWTH_POINTS: usize = 8;

fn is_false(v: &bool) -> bool {
    !*v
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
