//! What the NVML poller saw (`collect::gpu` fills it): devices, and per poll each device's
//! utilisation and memory and each GPU process's memory. Which rows belong to the profiled
//! tree is decided by `model::gpu`.

/// What the poller saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuRecording {
    /// Whether NVML could be used at all.
    pub available: bool,
    /// Why not (the one line the report shows).
    pub reason: Option<String>,
    /// The devices.
    pub devices: Vec<GpuDeviceInfo>,
    /// One entry per poll, in time order.
    pub polls: Vec<GpuPoll>,
    /// Whether per-process SM utilisation could be read (`nvmlDeviceGetProcessUtilization`).
    pub process_util: bool,
    /// What went wrong during the run (polling stops at the first failure).
    pub notes: Vec<String>,
}

/// A device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuDeviceInfo {
    /// NVML index.
    pub index: u32,
    /// Name.
    pub name: String,
    /// Total memory in bytes.
    pub memory_total: u64,
}

/// One poll of every device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuPoll {
    /// Nanoseconds from launch.
    pub t_ns: u64,
    /// Device-wide readings.
    pub devices: Vec<DeviceReading>,
    /// Processes with a GPU context, on any device.
    pub processes: Vec<GpuProcessReading>,
}

/// Device-wide readings of one poll.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceReading {
    /// Device index.
    pub index: u32,
    /// Percent of the last sample period a kernel ran.
    pub util_pct: u32,
    /// Device memory in use (bytes).
    pub memory_used: u64,
}

/// One process on one device at one poll.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuProcessReading {
    /// Device index.
    pub device: u32,
    /// The pid as seen from our PID namespace (translated through `NSpid` when needed).
    pub pid: u32,
    /// GPU memory it uses (bytes; 0 when the driver does not say).
    pub memory_bytes: u64,
    /// SM utilisation since the previous poll (percent), when per-process samples exist.
    pub sm_util_pct: Option<u32>,
    /// Whether the pid could be found in our PID namespace.
    pub visible: bool,
}
