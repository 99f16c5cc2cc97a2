//! The channel between a profiled process and the collector: one shared-memory file per
//! process holding a fixed [`Header`] (identity, exact heap counters, exit status) followed by
//! a ring of fixed-size [`Record`]s.
//!
//! Both sides use this crate, so the collector never links the preload library. Everything
//! here is `no_std`, allocation-free and lock-free: the writer side runs inside allocation
//! hooks and signal handlers of the target.
#![no_std]

use core::ffi::CStr;

pub mod gpu;
pub mod gpu_kernels;
pub mod record;
pub mod ring;

pub use gpu::{gpu_copy, gpu_space, GpuAlloc, GpuCopy, GpuFree, GpuLaunch};
pub use gpu_kernels::{gpu_trace, GpuCorrelation, GpuKernel, MAX_KERNEL_NAME};
pub use record::{
    alloc_flags, region_phase, region_report, sample_flags, Alloc, Code, Frame, Kind, MemCopy,
    ProcessExit, ProcessStart, Record, Region, Sample, ThreadStart, DATA_BYTES, FRAMES_PER_RECORD,
    MAX_REGION_NAME, UNKNOWN_CODE,
};
pub use ring::{Group, Header, HeapCounters, Ring, Slot, WireError};

/// First eight bytes of every channel file: `MLPROFw` and a NUL.
pub const MAGIC: u64 = u64::from_le_bytes(*b"MLPROFw\0");
/// Bumped whenever the layout of [`Header`], [`Slot`] or [`Record`] changes.
pub const VERSION: u32 = 13;

/// The highest CPU sampling rate (samples per second) `run` and `attach` use; a higher
/// `--rate` is clamped to it.
pub const MAX_RATE_HZ: u32 = 10_000;

/// Environment variables naming a process's rank in a distributed job, most specific first
/// (torchrun sets `RANK` in workers that Slurm also numbers by node), each with the local rank
/// and world size of the same launcher: (rank, local rank, world size).
pub const RANK_VARIABLES: [(&str, &str, &str); 5] = [
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_SIZE",
    ),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    (
        "JAX_PROCESS_ID",
        "JAX_LOCAL_PROCESS_ID",
        "JAX_NUM_PROCESSES",
    ),
];
/// Bytes reserved for the command line (NUL-separated, as in `/proc/PID/cmdline`).
pub const CMDLINE_BYTES: usize = 4096;
/// Bytes reserved for the Python version string (`3.11.7`), NUL-padded.
pub const PYVERSION_BYTES: usize = 32;
/// Default number of ring slots (64 bytes each: 1 MiB per process).
pub const DEFAULT_SLOTS: u64 = 16384;
/// Environment variable naming the private directory where channel files are created.
pub const ENV_DIR: &CStr = c"MLPROF_DIR";
/// Environment variable with the mean bytes between allocation samples (0: no sampling).
pub const ENV_MEMORY_SAMPLE: &CStr = c"MLPROF_MEMORY_SAMPLE_BYTES";
/// Environment variable with the mean bytes between copy samples (0: no copy sampling).
pub const ENV_COPY_SAMPLE: &CStr = c"MLPROF_COPY_SAMPLE_BYTES";
/// Environment variable with the mean CUDA kernel launches between launch samples (1: every
/// launch; 0: none; unset: the preload library's default, 64).
pub const ENV_GPU_LAUNCH_SAMPLE: &CStr = c"MLPROF_GPU_LAUNCH_SAMPLE";
/// Environment variable that, when `0`, keeps the preload library from setting up CUPTI (no
/// GPU kernel time; `--no-gpu-time`).
pub const ENV_GPU_KERNELS: &CStr = c"MLPROF_GPU_KERNELS";
/// Environment variable that, when `1`, has the preload library ask PyTorch for its CUDA
/// allocator's trace (tensors at the GPU peak); `mlprof run` sets it to `1` where an NVIDIA
/// driver is present (or it is `1` in mlprof's own environment), else `0` (`--no-gpu-tensors`).
pub const ENV_GPU_TENSORS: &CStr = c"MLPROF_GPU_TENSORS";
/// The file name of the code the preload library runs in a process that imports `torch` (its
/// tracing half): mlprof's, never a line of the program nor a frame of its stacks.
pub const TENSOR_HOOK_FILE: &CStr = c"<mlprof gpu trace>";
/// Environment variable with the CPU sampling rate in Hz (0: no CPU sampling).
pub const ENV_RATE: &CStr = c"MLPROF_RATE_HZ";
/// Environment variable that, when non-zero, keeps child processes unprofiled (`--no-follow`):
/// the preload library removes itself from `LD_PRELOAD` before anything can be spawned.
pub const ENV_NO_FOLLOW: &CStr = c"MLPROF_NO_FOLLOW";
/// Signals that mlprof passes on to the command it launched (Linux numbers: SIGHUP, SIGINT,
/// SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM). The preload library notes when the program's handlers
/// receive them ([`Header::signal_ns`]).
pub const FORWARDED_SIGNALS: [i32; 6] = [1, 2, 3, 10, 12, 15];
/// File name suffix of channel files: `<pid>.<start_ns>.ring`.
pub const FILE_SUFFIX: &str = ".ring";

/// What the preload library could do with the process's Python ([`Header::python_status`]).
pub mod python_status {
    /// Not a Python process (no CPython symbols).
    pub const NONE: u32 = 0;
    /// Python frames are walked with the derived table of this version (on 3.13+, which
    /// agrees with the interpreter's `_Py_DebugOffsets` on every value).
    pub const WALKED: u32 = 1;
    /// A CPython version without a layout table (older than 3.9, or a debug build): Python
    /// attribution is off.
    pub const UNSUPPORTED_VERSION: u32 = 2;
    /// A free-threaded build that cannot be read. No longer sent (free-threaded builds are
    /// read since 3.13t); kept for channels of older libraries.
    pub const FREE_THREADED: u32 = 3;
    /// 3.13+: the interpreter's `_Py_DebugOffsets` is not a table mlprof can read (its cookie,
    /// version or values fail the checks).
    pub const OFFSETS_MISMATCH: u32 = 4;
    /// A required interpreter symbol was not found.
    pub const MISSING_SYMBOL: u32 = 5;
    /// The process may not read its own memory with `process_vm_readv` (a seccomp filter or
    /// a container's policy refuses the call): Python frames cannot be read safely.
    pub const READ_REFUSED: u32 = 6;
    /// Python frames are walked with a layout taken from the interpreter's own
    /// `_Py_DebugOffsets` (a minor newer than any known, or values that differ from the
    /// derived table), which passed its self-check on a live stack.
    pub const WALKED_OFFSETS: u32 = 7;
    /// As [`WALKED_OFFSETS`], but the self-check has not run yet (no Python frame seen):
    /// frames are not walked meanwhile.
    pub const CHECK_PENDING: u32 = 8;
    /// The layout taken from `_Py_DebugOffsets` failed its self-check: frames are not walked.
    pub const CHECK_FAILED: u32 = 9;

    /// Whether frames are walked in a process with this status.
    pub const fn walked(status: u32) -> bool {
        matches!(status, WALKED | WALKED_OFFSETS)
    }
}

/// How Python objects' memory is counted in the exact heap ([`Header::python_heap`]).
pub mod python_heap {
    /// Through `malloc` and pymalloc's arenas (default builds), or not a Python process.
    pub const ARENAS: u32 = 0;
    /// A free-threaded build: each object's mimalloc block, read from mimalloc's metadata by
    /// the wrapper around Python's allocator.
    pub const MIMALLOC: u32 = 1;
    /// A free-threaded build whose allocator was replaced after ours was installed (by
    /// `PYTHONMALLOC` or `-X dev`, at start-up): its objects are not counted.
    pub const REPLACED: u32 = 2;
    /// A free-threaded build whose blocks did not read as mimalloc's: not counted.
    pub const UNREADABLE: u32 = 3;
    /// A free-threaded build whose allocator could not be wrapped (no C API found): not
    /// counted.
    pub const UNWRAPPED: u32 = 4;
}

/// Process states stored in [`Header::state`].
pub mod state {
    /// The process is running (or died without saying so: killed).
    pub const RUNNING: u32 = 0;
    /// The process exited through `exit`/`_exit`; `exit_code` is valid.
    pub const EXITED: u32 = 1;
}

/// Most ring slots a channel may declare (64 MiB of slots). A reader refuses a header that
/// declares more (or a count that is not a power of two): the header is untrusted input.
pub const MAX_SLOTS: u64 = 1 << 20;
/// Most Python frames one sample, allocation or copy may declare. The preload library sends at
/// most 128; a reader treats a larger count as corruption.
pub const MAX_FRAMES: usize = 1024;
/// Most bytes a code object's file name, qualified name or line table may declare. The preload
/// library cuts each at 16 KiB; a reader treats a larger length as corruption.
pub const MAX_BLOB_BYTES: usize = 64 * 1024;

/// Total bytes of a channel file with `slots` ring slots, or `None` when `slots` is not a
/// power of two no larger than [`MAX_SLOTS`].
pub const fn checked_file_bytes(slots: u64) -> Option<usize> {
    if !slots.is_power_of_two() || slots > MAX_SLOTS {
        return None;
    }
    // Cannot overflow: slots <= MAX_SLOTS, so the ring is at most 64 MiB.
    Some(core::mem::size_of::<Header>() + (slots as usize) * core::mem::size_of::<Slot>())
}

/// Total bytes of a channel file with `slots` ring slots; `usize::MAX` for a slot count that
/// [`checked_file_bytes`] refuses (so that a size check against it fails).
pub const fn file_bytes(slots: u64) -> usize {
    match checked_file_bytes(slots) {
        Some(bytes) => bytes,
        None => usize::MAX,
    }
}
