//! What the GPU said of the kernels a process's launches ran (CUPTI's activity records, read
//! in the process by the preload library and joined by `collect`): every kernel's device time
//! per device and name (exact), and the kernels whose launch was sampled with its Python
//! stack, folded per thread, stack, name and stretch between region boundaries (each standing
//! for its launch sample's weight). See docs/design/gpu-kernel-time.md.

use super::GpuFolded;

/// The kernels of one process image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuKernels {
    /// Kernel names, by index (as the process sent them, cut at `MAX_KERNEL_NAME` bytes;
    /// empty while a name has not arrived).
    pub names: Vec<String>,
    /// Every kernel, per device and name.
    pub all: Vec<GpuKernelSum>,
    /// Kernels whose launch was sampled, per thread, stack, device and name.
    pub sampled: Vec<GpuKernelTotal>,
    /// The trace's state (`mlprof_wire::gpu_trace`) and its detail, as last told; `None`
    /// when the process never looked for CUPTI (it launched nothing).
    pub state: Option<(u8, u64)>,
    /// When the program took CUPTI for itself (ns from launch), if it did.
    pub taken_ns: Option<u64>,
    /// Activity records CUPTI dropped (its buffers were full).
    pub dropped: u64,
}

impl GpuKernels {
    /// Whether any kernel was recorded.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The name of index `i`.
    pub fn name(&self, i: u32) -> &str {
        self.names.get(i as usize).map_or("", String::as_str)
    }
}

/// Every kernel of one device and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuKernelSum {
    /// The device.
    pub device: u32,
    /// Index in [`GpuKernels::names`].
    pub name: u32,
    /// Kernels.
    pub kernels: u64,
    /// Their device time (ns).
    pub device_ns: u64,
}

/// Kernels of sampled launches of one thread, stack, device and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuKernelTotal {
    /// Kernel thread id of the launching thread.
    pub tid: u32,
    /// Python frames of the launch, innermost first.
    pub frames: Vec<(u32, i32)>,
    /// The device.
    pub device: u32,
    /// Index in [`GpuKernels::names`].
    pub name: u32,
    /// Kernels they stand for (the launch samples' weights).
    pub kernels: u64,
    /// Device time they stand for (ns: each kernel's time times its launch's weight).
    pub device_ns: u64,
    /// Time of the first launch (ns from launch).
    pub first_ns: u64,
    /// Time of the last launch.
    pub last_ns: u64,
}

impl GpuFolded for GpuKernelTotal {
    fn first_ns(&self) -> u64 {
        self.first_ns
    }
    fn last_ns(&self) -> u64 {
        self.last_ns
    }
    fn shifted(&self, from: u64) -> Self {
        GpuKernelTotal {
            first_ns: self.first_ns.saturating_sub(from),
            last_ns: self.last_ns.saturating_sub(from),
            ..self.clone()
        }
    }
}
