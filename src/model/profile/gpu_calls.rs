//! The profile's account of the CUDA runtime calls (`docs/design/gpu.md`, "CUDA calls"): a
//! line's figures (flattened into its measures) and a process's totals, device peaks and the
//! memory held over time. Types only; `model::gpu_calls` fills them.

use serde::{Deserialize, Serialize};

/// What a process's CUDA runtime calls did, in total.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessGpuCalls {
    /// The totals of its lines (`gpu_peak_bytes`: the sum of its devices' peaks).
    #[serde(flatten)]
    pub totals: GpuLineCalls,
    /// Each device's highest memory held through the calls, when, and over time.
    pub devices: Vec<GpuCallPeak>,
    /// Highest page-locked host memory held at once (bytes).
    pub pinned_peak_bytes: u64,
    /// Frees of memory no recorded allocation held (reserved before mlprof saw it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unmatched_frees: u64,
    /// NVML's memory of the process at its highest, split into what the calls held then and
    /// the rest (absent without NVML readings of the process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml: Option<NvmlSplit>,
    /// The GPU's account of the kernels the process ran (CUPTI; absent when it launched
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<ProcessKernels>,
}

/// The kernels a process ran on its GPUs, by CUPTI's account (exact: every kernel).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessKernels {
    /// `on` (kernel time recorded), `no_cupti` (no CUPTI library beside the process's CUDA
    /// libraries), `failed` (CUPTI refused) or `program_owns` (the program took CUPTI for a
    /// profiler of its own, and recording stopped then).
    pub state: String,
    /// Why kernel time is missing or partial, in words (empty when it is whole).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// Device seconds of every kernel recorded.
    pub gpu_kernel_s: f64,
    /// Of it, the kernels of names no sampled launch ran (no line holds them).
    #[serde(default)]
    pub unattributed_s: f64,
    /// Kernels recorded.
    pub kernels: u64,
    /// Activity records CUPTI dropped (buffers full): kernel time is missing for them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_records: u64,
    /// The kernels that took most device time, most first (at most 10).
    pub top: Vec<KernelShare>,
}

/// Kernels of one name (on one device, or on a line).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelShare {
    /// The kernel's name as CUPTI gives it (mangled C++ names as they are).
    pub name: String,
    /// The device (absent when summed over devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// Device seconds.
    pub gpu_s: f64,
    /// Kernels.
    pub kernels: u64,
}

/// Every byte NVML reported for a process at its highest, accounted for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlSplit {
    /// NVML's highest memory of the process, all devices (bytes).
    pub peak_bytes: u64,
    /// Seconds from launch of that reading (the last, when it held that much more than once).
    pub at_s: f64,
    /// Of it, what the CUDA calls held then (the lines' allocations).
    pub through_calls_bytes: u64,
    /// The rest: the CUDA context, libraries' workspaces (cuBLAS, cuDNN, NCCL), and memory
    /// reserved other than through the runtime's calls (the driver API).
    pub not_seen_bytes: u64,
}

/// One device's memory held through CUDA calls: its peak, its end and its timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuCallPeak {
    /// The device (absent when the runtime did not say).
    pub device: Option<u32>,
    /// Highest bytes held at once (device and managed allocations, exact).
    pub peak_bytes: u64,
    /// Seconds from launch when it was first reached.
    pub at_s: f64,
    /// Held at the process's end (not given back).
    pub end_bytes: u64,
    /// Bytes held over time, one point per moment the calls changed it, reduced to at most
    /// [`crate::model::timeline::GPU_POINTS`] by merging neighbours into their highest (at the
    /// moment it was first reached), so that the highest point is `peak_bytes` at `at_s` and the
    /// last is `end_bytes` (empty in older profiles).
    #[serde(default)]
    pub timeline: Vec<GpuHeldSample>,
}

/// One point of a device's memory held through CUDA calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHeldSample {
    /// Seconds from launch.
    pub t_s: f64,
    /// Bytes held from then on (device and managed allocations, exact).
    pub bytes: u64,
}

/// What the CUDA runtime calls made under a line did (`docs/design/gpu.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuLineCalls {
    /// Device (and managed) memory the line's allocations reserved (bytes; exact).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_reserved_bytes: u64,
    /// How many allocations.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_reserved_calls: u64,
    /// Of `gpu_reserved_bytes`, what was still held when its process's device memory was at
    /// its highest (each device at its own peak; exact).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_peak_bytes: u64,
    /// Of `gpu_reserved_bytes`, what was given back before the process ended.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_freed_bytes: u64,
    /// Page-locked host memory reserved (`cudaMallocHost`, `cudaHostAlloc`; bytes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_pinned_bytes: u64,
    /// How many of those allocations.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_pinned_calls: u64,
    /// Of `gpu_pinned_bytes`, what was still held when the process ended (never given back).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_pinned_end_bytes: u64,
    /// Bytes copied host to device.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_h2d_bytes: u64,
    /// Bytes copied device to host.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_d2h_bytes: u64,
    /// Bytes copied device to device (peer copies included).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_d2d_bytes: u64,
    /// Kernel (and graph) launches (estimated from a sample of them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_launches: u64,
    /// Device seconds of the kernels the line launched ("GPU time": CUPTI's start and end of
    /// each kernel, estimated from the sampled launches; absent without CUPTI).
    #[serde(default, skip_serializing_if = "is_zero_s")]
    pub gpu_kernel_s: f64,
    /// How many kernels those were (estimated likewise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_kernels: u64,
    /// Seconds threads waited for the GPU here (stream, event and device synchronisations,
    /// synchronous copies): part of `waiting_s`.
    #[serde(default, skip_serializing_if = "is_zero_s")]
    pub gpu_wait_s: f64,
}

impl GpuLineCalls {
    /// Add `other`'s figures.
    pub fn add(&mut self, other: &GpuLineCalls) {
        self.gpu_reserved_bytes += other.gpu_reserved_bytes;
        self.gpu_reserved_calls += other.gpu_reserved_calls;
        self.gpu_peak_bytes += other.gpu_peak_bytes;
        self.gpu_freed_bytes += other.gpu_freed_bytes;
        self.gpu_pinned_bytes += other.gpu_pinned_bytes;
        self.gpu_pinned_calls += other.gpu_pinned_calls;
        self.gpu_pinned_end_bytes += other.gpu_pinned_end_bytes;
        self.gpu_h2d_bytes += other.gpu_h2d_bytes;
        self.gpu_d2h_bytes += other.gpu_d2h_bytes;
        self.gpu_d2d_bytes += other.gpu_d2d_bytes;
        self.gpu_launches += other.gpu_launches;
        self.gpu_kernel_s += other.gpu_kernel_s;
        self.gpu_kernels += other.gpu_kernels;
        self.gpu_wait_s += other.gpu_wait_s;
    }

    /// Whether there is anything.
    pub fn is_empty(&self) -> bool {
        *self == GpuLineCalls::default()
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_s(v: &f64) -> bool {
    *v == 0.0
}
