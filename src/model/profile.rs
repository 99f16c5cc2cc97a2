//! The profile: the one data model every renderer and the CI gate read, serialised as the
//! JSON profile documented in `docs/profile-schema.md`. Units are in every field name.

use serde::{Deserialize, Serialize};

mod gpu_calls;
mod gpu_tensors;
pub use gpu_calls::{
    GpuCallPeak, GpuHeldSample, GpuLineCalls, KernelShare, NvmlSplit, ProcessGpuCalls,
    ProcessKernels,
};
pub use gpu_tensors::{DeviceTensors, ProcessTensors, TensorLine, TensorOom, GROWTH_POINTS};

/// Schema identifier written into every profile; bumped when a field is renamed or removed.
pub const SCHEMA: &str = "mlprof/1";

/// A whole profile of one `mlprof run`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The profiled command and its arguments.
    pub command: Vec<String>,
    /// How the profiled command ended.
    pub exit: Exit,
    /// Wall-clock seconds from launch to the end of the command.
    pub wall_s: f64,
    /// User-mode CPU seconds of the direct child and every descendant it waited for (exact,
    /// from the kernel's `wait4`; orphaned or daemonised descendants are not included).
    #[serde(default)]
    pub cpu_user_s: f64,
    /// Kernel-mode CPU seconds, same scope as `cpu_user_s`.
    #[serde(default)]
    pub cpu_kernel_s: f64,
    /// CPU seconds of descendants the kernel's `wait4` did not count: reaped by a process
    /// outside the waited chain (ray's raylet reaps its workers) or still running. What the
    /// process rows add up to beyond `cpu_user_s + cpu_kernel_s` (0 when attached).
    #[serde(default)]
    pub cpu_unreaped_s: f64,
    /// The direct child and every descendant that loaded the preload library.
    pub processes: Vec<Process>,
    /// Memory summary and footprint timeline.
    pub memory: Memory,
    /// GPU summary and timeline.
    pub gpu: Gpu,
    /// Per source line measures, whole process tree.
    pub lines: Vec<LineStats>,
    /// Per function measures, whole process tree.
    pub functions: Vec<FunctionStats>,
    /// CPU over time, all processes: time in each kind per bucket (at most a few hundred).
    #[serde(default)]
    pub cpu_timeline: Vec<CpuSample>,
    /// CPU samples over time (thinned evenly to at most 20,000): for timeline views.
    #[serde(default)]
    pub samples: Vec<TimedSample>,
    /// Frames referred to by `stacks`.
    #[serde(default)]
    pub stack_frames: Vec<StackFrame>,
    /// Whole stacks (outermost frame first) with their time and bytes: flame graphs, exports.
    #[serde(default)]
    pub stacks: Vec<StackStats>,
    /// Per thread CPU and waiting time.
    #[serde(default)]
    pub threads: Vec<ThreadStats>,
    /// Events lost because a channel was full.
    pub dropped_events: u64,
    /// Mean CPU sampling interval in seconds (0: CPU sampling was off).
    #[serde(default)]
    pub sample_interval_s: f64,
    /// Mean bytes allocated between two allocation samples (`--memory-sample-bytes`; 0: not
    /// recorded, in profiles older than `mlprof diff`, or memory was not sampled).
    #[serde(default)]
    pub memory_sample_bytes: u64,
    /// Mean bytes copied between two copy samples (`--copy-sample-bytes`; 0 as above).
    #[serde(default)]
    pub copy_sample_bytes: u64,
    /// CPUs the run could use (the collector's CPU affinity; 0: not recorded).
    #[serde(default)]
    pub cpus: u32,
    /// What the profiler's own process cost while it recorded (all zero: not recorded, as
    /// in a region's profile).
    #[serde(default)]
    pub profiler: ProfilerCpu,
    /// Suggestions drawn from this profile by fixed rules (`pipeline::hints`), largest saving
    /// first; empty with `--no-hints`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<super::sections::Hint>,
    /// CPU samples taken (all processes and threads).
    #[serde(default)]
    pub cpu_samples: u64,
    /// Width of the windows into which the collector merged events older than a few seconds,
    /// each at its window's start (0: none were merged; see `docs/design/bounded-collector.md`).
    #[serde(default)]
    pub event_window_s: f64,
    /// Whose waiting counts on lines, functions, stacks and the CPU timeline ([`Idle`]).
    /// `threads` always carry every thread's waiting.
    #[serde(default)]
    pub idle: Idle,
    /// Where and as what the run happened: `host`, and `RANK`, `LOCAL_RANK`, `WORLD_SIZE` when
    /// set (distributed jobs), for merging and for continuous-profiling backends.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Budgets this run exceeded (`gate::verdicts`, baseline regressions included); empty if
    /// none or none set.
    #[serde(default)]
    pub violations: Vec<super::sections::Violation>,
    /// Things the user should know about how this profile was measured.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The ranks of a distributed job: in a single run, one per rank its processes' environment
    /// named (`RANK`, `SLURM_PROCID`, ...) when there are two or more; in a profile made by
    /// `mlprof merge`, one per merged profile (or per rank inside it), in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<Rank>,
    /// Lines where one rank spends meaningfully more than the other ranks' median (beyond
    /// sampling noise), largest excess first; empty with fewer than two ranks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stragglers: Vec<Straggler>,
    /// Ranks whose heap peak is meaningfully above the others', largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_imbalance: Vec<MemoryImbalance>,
    /// Regions the program marked itself (`mlprof.mark(...)`, one per test under the pytest
    /// plugin), in begin order; empty (and absent from the JSON) if none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<super::sections::Region>,
    /// Made by `mlprof attach` (from outside a running process): no heap, allocations, copies
    /// or exit status were measured; absent (false) for `mlprof run`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attached: bool,
}

/// Whose waiting a profile counts on its lines, functions, stacks and CPU timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Idle {
    /// Not said: a profile from before the field (`""`).
    #[default]
    #[serde(rename = "")]
    Unrecorded,
    /// Each process's main thread, and other threads while it waits too (the default).
    Main,
    /// Every thread's (`--idle`).
    All,
}

impl Idle {
    /// The name the profile gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Idle::Unrecorded => "",
            Idle::Main => "main",
            Idle::All => "all",
        }
    }
}

impl Profile {
    /// CPU seconds of the whole tree: what `wait4` counted and what processes reaped
    /// elsewhere used.
    pub fn cpu_s(&self) -> f64 {
        self.cpu_user_s + self.cpu_kernel_s + self.cpu_unreaped_s
    }
}

/// One merged profile's totals (see `mlprof merge`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rank {
    /// `rank N` from the `RANK` label, else the host, else the file name.
    pub name: String,
    /// The profile file it came from.
    pub source: String,
    /// Its labels (host, rank, local_rank, world_size).
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its command.
    pub command: Vec<String>,
    /// How its command ended.
    pub exit: Exit,
    /// Its wall-clock seconds.
    pub wall_s: f64,
    /// Its user + kernel CPU seconds: the larger of `/proc`'s last reading and what its
    /// samples hold.
    pub cpu_s: f64,
    /// Its process tree's peak heap.
    pub peak_heap_bytes: u64,
    /// Its process tree's peak RSS.
    pub peak_rss_bytes: u64,
    /// Its GPU memory peak.
    pub peak_gpu_memory_bytes: u64,
    /// Whether its GPU was polled.
    #[serde(default)]
    pub gpu_available: bool,
    /// Its average GPU utilisation.
    #[serde(default)]
    pub gpu_average_util_pct: f64,
    /// Bytes its lines allocated (sampled estimate, summed over lines).
    pub alloc_bytes: u64,
    /// Its processes.
    pub processes: usize,
    /// Its dropped events.
    pub dropped_events: u64,
    /// Its rank number, when its processes' environment (or the `RANK` label) gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Its processes' ids (in a merged profile: as on its host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
    /// CPU seconds interpreting Python, on its lines.
    #[serde(default)]
    pub cpu_python_s: f64,
    /// CPU seconds in native code, on its lines.
    #[serde(default)]
    pub cpu_native_s: f64,
    /// Waiting seconds on its lines.
    #[serde(alias = "cpu_system_s", default)]
    pub waiting_s: f64,
    /// CPU seconds the kernel spent on page faults, on its lines.
    #[serde(default)]
    pub kernel_s: f64,
    /// Seconds (CPU and waiting) inside collective communication: torch.distributed
    /// collectives (all-reduce, barrier, broadcast, all-gather, ...), gloo, NCCL and MPI.
    #[serde(default)]
    pub collective_s: f64,
    /// Its lines, most time first (at most 200, and those holding memory at its peak): the
    /// figures the ranks are compared by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<RankLine>,
}

/// One line of one rank ([`Rank::lines`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankLine {
    /// Source file.
    pub file: String,
    /// Line number.
    pub line: u32,
    /// Function.
    pub function: String,
    /// Seconds on the line: CPU (Python and native) and waiting.
    pub time_s: f64,
    /// The waiting part of `time_s`.
    pub waiting_s: f64,
    /// Bytes the line held at the rank's heap peak.
    pub peak_bytes: u64,
}

/// A line where one rank spends meaningfully more time than the other ranks' median.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Straggler {
    /// Source file.
    pub file: String,
    /// Line number.
    pub line: u32,
    /// Function.
    pub function: String,
    /// The line's source text.
    #[serde(default)]
    pub source: String,
    /// The rank's number (or its position among the ranks when it has none).
    pub rank: u32,
    /// The rank's name (`rank 1`, or a host).
    pub name: String,
    /// Seconds beyond the median of the other ranks on this line.
    pub excess_s: f64,
    /// The other ranks' median seconds on this line.
    pub median_s: f64,
    /// Whether the excess is mostly waiting (a rank held up, at a collective or a barrier,
    /// typically by another rank's excess elsewhere).
    pub waiting: bool,
}

/// A rank whose heap peak is meaningfully above the other ranks' median, and the line that
/// holds most of the difference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryImbalance {
    /// The rank's number (or position).
    pub rank: u32,
    /// The rank's name.
    pub name: String,
    /// Its heap peak beyond the other ranks' median.
    pub excess_bytes: u64,
    /// The other ranks' median heap peak.
    pub median_bytes: u64,
    /// The line holding the most more than the other ranks' median at their peaks.
    pub file: String,
    /// Line number.
    pub line: u32,
    /// Function.
    pub function: String,
    /// The line's source text.
    #[serde(default)]
    pub source: String,
    /// Bytes that line holds beyond the other ranks' median for it.
    pub line_excess_bytes: u64,
}

/// How one line's time spreads across ranks ([`LineStats::ranks`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The least seconds a rank spent on the line.
    pub min_s: f64,
    /// The median over ranks.
    pub median_s: f64,
    /// The most seconds a rank spent on it.
    pub max_s: f64,
    /// The rank with the least.
    pub min_rank: u32,
    /// The rank with the most.
    pub max_rank: u32,
}

/// How a process ended. Both `None`: still running when profiling stopped, or killed by a
/// signal mlprof could not observe (a descendant reaped by its own parent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// Exit code, if it exited normally.
    pub code: Option<i32>,
    /// Signal number, if a signal killed it.
    pub signal: Option<i32>,
}

/// One process of the profiled tree.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Command line of the last program this process ran.
    pub command: Vec<String>,
    /// How it ended.
    pub exit: Exit,
    /// CPython version, if the process was a Python interpreter (`3.13.5t` for a
    /// free-threaded build).
    pub python: Option<String>,
    /// Where the layout its frames were read with came from: `"table"` (mlprof's table of that
    /// version, agreeing on 3.13+ with the interpreter's own `_Py_DebugOffsets`) or
    /// `"interpreter"` (its `_Py_DebugOffsets` alone, for a version newer than mlprof knows or
    /// values the table does not have, after a self-check); absent when frames were not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_layout: Option<String>,
    /// Highest heap (bytes in live malloc-family blocks) the process reached; exact.
    pub peak_heap_bytes: u64,
    /// Highest resident set size seen.
    pub peak_rss_bytes: u64,
    /// Bytes allocated in total over the process's life (malloc family, exact).
    #[serde(default)]
    pub alloc_bytes: u64,
    /// Number of allocations.
    #[serde(default)]
    pub alloc_count: u64,
    /// CPU seconds (user + kernel) of this process alone, last read from `/proc`.
    #[serde(default)]
    pub cpu_s: f64,
    /// Seconds from launch when the process was first seen.
    #[serde(default)]
    pub start_s: f64,
    /// Seconds from launch when the process first ran Python (its first image with an
    /// interpreter: later than `start_s` for a launcher that execs Python); none without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_start_s: Option<f64>,
    /// Whether the preload library was loaded (false: statically linked or not followed; only
    /// RSS and CPU from `/proc` were measured).
    #[serde(default)]
    pub instrumented: bool,
    /// True for a fork child that did not exec (it inherited its parent's heap).
    #[serde(default)]
    pub forked: bool,
    /// Heap bytes a fork child inherited from its parent (included in its peak).
    #[serde(default)]
    pub inherited_heap_bytes: u64,
    /// Highest bytes of anonymous mappings the process made itself (`mmap` outside the malloc
    /// family), exact; apart from the heap (`docs/design/mapped-memory.md`).
    #[serde(default)]
    pub peak_mapped_bytes: u64,
    /// Highest GPU memory NVML reported for this process (bytes; 0 without a GPU context).
    #[serde(default)]
    pub peak_gpu_memory_bytes: u64,
    /// What its CUDA runtime calls did, in total (absent without any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_calls: Option<ProcessGpuCalls>,
    /// Its PyTorch tensors on the GPU at its allocator's peak (absent when its allocator was
    /// not traced: no PyTorch on CUDA, or `--no-gpu-tensors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_tensors: Option<ProcessTensors>,
    /// Still running when mlprof stopped collecting (it outlived the command by more than
    /// `--wait-children`); its figures cover the time until then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub still_running: bool,
    /// Its local rank on its node, when its environment named one (`LOCAL_RANK`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// Seconds its main thread waited for its child processes while it did nothing else (a
    /// launcher: torchrun's agent, `mpirun`, a parent in `join`); not charged to its lines.
    #[serde(default)]
    pub waiting_for_children_s: f64,
    /// Most of its threads busy at once: threads with a tenth of a CPU at least in one
    /// 250 ms stretch, in the second busiest stretch (0 in older profiles).
    #[serde(default)]
    pub peak_busy_threads: u32,
    /// The rank it ran as (`rank N`, from its environment: `RANK`, `SLURM_PROCID`, ...); in a
    /// merged profile without one, the name of the merged profile (rank or host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<String>,
}

/// Memory summary of the process tree.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Highest heap of the tree: exact per process; for several processes at once, the highest
    /// sampled sum.
    pub peak_heap_bytes: u64,
    /// Highest resident set size of the tree.
    pub peak_rss_bytes: u64,
    /// Seconds from launch when the heap peak was reached (to the sampling interval).
    pub peak_at_s: f64,
    /// At the moment of the RSS peak, resident bytes the counted heap and mappings do not
    /// explain:
    /// interpreter and library code, mapped files, thread stacks, and allocators mlprof cannot
    /// see (linked privately into wheels: jemalloc, mimalloc, CUDA caching).
    #[serde(default)]
    pub unaccounted_bytes: u64,
    /// Highest bytes of anonymous mappings the programs made themselves, apart from the heap:
    /// the sum of each process's own peak (exact for one process).
    #[serde(default)]
    pub peak_mapped_bytes: u64,
    /// Highest heap and mapped bytes of the tree together, at one collector tick (every
    /// 20 ms), and never below the heap peak: all the memory mlprof counts, to set against
    /// `peak_rss_bytes`. Mapped bytes count here as far as the resident anonymous memory
    /// beside the heap can hold them (allocators map capacity they never touch). 0 in
    /// profiles older than this field.
    #[serde(default)]
    pub peak_counted_bytes: u64,
    /// Seconds from launch of the instant each line's held bytes (`peak_bytes`) are taken at:
    /// the heap peak's, or the collector tick at which heap and mapped memory together were
    /// highest where that was more (a program whose memory is mostly mapped). Older profiles:
    /// `peak_at_s`.
    #[serde(default)]
    pub held_at_s: Option<f64>,
    /// Footprint over time, at most a few thousand points (older points merged, keeping maxima).
    pub timeline: Vec<MemorySample>,
}

impl Memory {
    /// What the lines' held bytes add up to: the counted peak (heap and mapped memory as far
    /// as resident) where mapped memory set it, else the heap's peak.
    pub fn held_peak_bytes(&self) -> u64 {
        match self.held_at_s {
            // Taken at a tick where mapped memory set the peak: the counted peak.
            Some(t) if t != self.peak_at_s => self.peak_counted_bytes.max(self.peak_heap_bytes),
            _ => self.peak_heap_bytes,
        }
    }

    /// Seconds from launch of the instant the lines' held bytes are taken at.
    pub fn held_at_s(&self) -> f64 {
        self.held_at_s.unwrap_or(self.peak_at_s)
    }
}

/// One point of the footprint timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySample {
    /// Seconds from launch.
    pub t_s: f64,
    /// Heap of the tree (bytes).
    pub heap_bytes: u64,
    /// Resident set size of the tree (bytes).
    pub rss_bytes: u64,
    /// Anonymous mappings of the tree, apart from the heap (bytes; 0 in older profiles).
    #[serde(default)]
    pub mapped_bytes: u64,
}

/// One CPU sample on the timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimedSample {
    /// Seconds from launch.
    pub t_s: f64,
    /// Process id.
    pub pid: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// Index into `stacks`.
    pub stack: u32,
    /// CPU seconds it stands for.
    pub cpu_s: f64,
}

/// One bucket of the CPU timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSample {
    /// Start of the bucket, seconds from launch.
    pub t_s: f64,
    /// Bucket length in seconds.
    pub span_s: f64,
    /// CPU seconds interpreting Python in the bucket (all threads).
    pub python_s: f64,
    /// CPU seconds in native code.
    pub native_s: f64,
    /// Seconds Python threads spent waiting.
    #[serde(alias = "system_s")]
    pub waiting_s: f64,
    /// CPU seconds the kernel spent on page faults.
    #[serde(default)]
    pub kernel_s: f64,
}

/// GPU summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// Whether GPU figures were collected.
    pub available: bool,
    /// Why not, when `available` is false.
    pub reason: Option<String>,
    /// Devices seen.
    pub devices: Vec<GpuDevice>,
    /// Highest GPU memory used by the process tree (bytes).
    pub peak_memory_bytes: u64,
    /// Mean SM utilisation of the tree's processes over the polls of the run (percent).
    #[serde(default)]
    pub average_util_pct: f64,
    /// Utilisation and memory over time.
    pub timeline: Vec<GpuSample>,
    /// What limited the GPU figures (polling stopped by an NVML error, no per-process data).
    #[serde(default)]
    pub notes: Vec<String>,
    /// What the tree's CUDA calls did: its processes' `gpu_calls` totals summed (none without
    /// any call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<GpuLineCalls>,
}

/// One GPU device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// Device index.
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// Total memory (bytes).
    pub memory_total_bytes: u64,
}

/// One point of the GPU timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Seconds from launch.
    pub t_s: f64,
    /// Utilisation of the devices used by the tree (percent).
    pub util_pct: f64,
    /// GPU memory used by the tree (bytes).
    pub memory_bytes: u64,
    /// Utilisation of the devices by anyone, mean over devices (percent).
    #[serde(default)]
    pub device_util_pct: f64,
    /// Memory in use on the devices by anyone (bytes).
    #[serde(default)]
    pub device_memory_bytes: u64,
}

/// Measures of one source line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LineStats {
    /// Absolute path of the source file.
    pub file: String,
    /// 1-based line number.
    pub line: u32,
    /// Qualified name of the function the line belongs to.
    pub function: String,
    /// The source text of the line, if the file could be read when the profile was made.
    #[serde(default)]
    pub source: String,
    /// Bytes allocated by this line and still live, at evenly spaced moments from launch to
    /// the end (sparkline data; sampled).
    #[serde(default)]
    pub footprint_bytes: Vec<u64>,
    /// How its time spreads across ranks (two or more ranks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Spread>,
    /// The measures.
    #[serde(flatten)]
    pub measures: Measures,
}

/// One frame of a stack: a Python function at a line, or a native function (file = library,
/// line 0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StackFrame {
    /// Source file, or library file name for a native frame.
    pub file: String,
    /// Qualified function name, or native symbol.
    pub function: String,
    /// Line in `file` (0 for native frames).
    pub line: u32,
}

/// One distinct stack and what was measured in it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StackStats {
    /// Process the stack was seen in.
    #[serde(default)]
    pub pid: u32,
    /// Indices into `stack_frames`, outermost first.
    pub frames: Vec<u32>,
    /// CPU seconds interpreting Python with this stack.
    pub cpu_python_s: f64,
    /// CPU seconds in native code (the leaf frame names it).
    pub cpu_native_s: f64,
    /// Seconds waiting with this stack.
    #[serde(alias = "cpu_system_s")]
    pub waiting_s: f64,
    /// CPU seconds the kernel spent on page faults with this stack.
    #[serde(default)]
    pub kernel_s: f64,
    /// Bytes allocated with this stack (sampled).
    pub alloc_bytes: u64,
    /// Of those, bytes still live at the heap peak.
    pub peak_bytes: u64,
}

/// Time of one thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadStats {
    /// Process id.
    pub pid: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// Whether the thread ran Python code (else a native thread: BLAS pool, I/O helper).
    pub python: bool,
    /// CPU seconds interpreting Python.
    pub cpu_python_s: f64,
    /// CPU seconds in native code.
    pub cpu_native_s: f64,
    /// Seconds waiting (sampled only for Python threads).
    #[serde(alias = "cpu_system_s")]
    pub waiting_s: f64,
    /// CPU seconds the kernel spent on its page faults.
    #[serde(default)]
    pub kernel_s: f64,
}

impl ThreadStats {
    /// Its seconds: CPU (Python, native, the kernel's on its page faults) and waiting.
    pub fn time_s(&self) -> f64 {
        self.cpu_python_s + self.cpu_native_s + self.kernel_s + self.waiting_s
    }
}

/// Measures of one function.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionStats {
    /// Absolute path of the source file.
    pub file: String,
    /// Qualified function name.
    pub function: String,
    /// First line of the function.
    pub line: u32,
    /// The measures.
    #[serde(flatten)]
    pub measures: Measures,
}

/// The measures shared by lines and functions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measures {
    /// CPU seconds spent interpreting Python.
    pub cpu_python_s: f64,
    /// CPU seconds spent in native code (extensions, BLAS, ...).
    pub cpu_native_s: f64,
    /// Seconds spent off-CPU waiting (sleep, I/O, locks, the GIL, worker processes), sampled
    /// from outside. Profiles before `kernel_s` counted page-fault time here too.
    #[serde(alias = "cpu_system_s")]
    pub waiting_s: f64,
    /// CPU seconds the kernel spent on this line's page faults (first touches of fresh memory:
    /// a new array filled, a copy into new pages); the kernel time of other system calls is
    /// counted with the code that made them, as Python or native time.
    #[serde(default)]
    pub kernel_s: f64,
    /// Part of `waiting_s` spent while the process's worker processes (its descendants)
    /// were computing: a loop waiting for data from its DataLoader workers, `client.gather`,
    /// `ray.get`, the wait for `torch.compile`'s compiler.
    #[serde(default)]
    pub waiting_for_workers_s: f64,
    /// Part of `cpu_native_s` that thread pools spent spinning or waiting at barriers (the
    /// OpenMP runtime, OpenBLAS's idle server loop) rather than working; listed in `native`
    /// as one row per runtime, `<pool spin and barrier wait>`.
    #[serde(default)]
    pub cpu_spin_s: f64,
    /// Bytes allocated (estimated from samples).
    pub alloc_bytes: u64,
    /// Part of `alloc_bytes` allocated by Python objects.
    pub alloc_python_bytes: u64,
    /// Held at the peak: heap bytes allocated here and live at the instant of
    /// `Memory::held_at_s`, and, where that instant is a tick at which mapped memory set the
    /// peak, the resident share of `mapped_peak_bytes`.
    pub peak_bytes: u64,
    /// Blocks allocated here and still live at the heap peak (estimated from the samples;
    /// `peak_bytes / peak_blocks` is their mean size).
    #[serde(default)]
    pub peak_blocks: u64,
    /// Bytes copied by memcpy/memmove.
    pub copy_bytes: u64,
    /// Part of `cpu_native_s` in numpy's element-wise copy and cast loops (a transposed or
    /// strided view made contiguous, `astype`, a gather): copies whose bytes are not in
    /// `copy_bytes`, since they never reach `memcpy`.
    #[serde(default)]
    pub copy_loop_s: f64,
    /// Anonymous mappings made here (`mmap` outside the malloc family) and still mapped when
    /// the process's mappings were at their highest, resident or not; `peak_bytes` holds the
    /// resident share of those live at its own instant, where mapped memory set the peak.
    #[serde(default)]
    pub mapped_peak_bytes: u64,
    /// Leak evidence, if the line likely leaks.
    pub leak: Option<Leak>,
    /// Percent of time the GPU was busy while this line ran.
    pub gpu_util_pct: f64,
    /// GPU memory growth while this line ran (bytes).
    pub gpu_memory_bytes: u64,
    /// What its CUDA calls did (exact; all zero without CUDA, and then left out of the JSON).
    #[serde(flatten)]
    pub gpu_calls: GpuLineCalls,
    /// Bytes of PyTorch tensors allocated here and live at their process's peak of allocated
    /// GPU memory, summed over its devices (the allocator's trace; exact within it).
    #[serde(default, skip_serializing_if = "is_zero_bytes")]
    pub gpu_tensor_peak_bytes: u64,
    /// Native functions that ran under this line.
    pub native: Vec<NativeFrame>,
    /// The kernels this line launched that took most device time (at most 5; estimated from
    /// the sampled launches, as `gpu_kernel_s`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_kernel_names: Vec<KernelShare>,
}

impl Measures {
    /// Its seconds, the report's "time": CPU (Python, native, the kernel's on its page faults)
    /// and waiting.
    pub fn time_s(&self) -> f64 {
        self.cpu_python_s + self.cpu_native_s + self.kernel_s + self.waiting_s
    }
}

/// Leak evidence for a line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Leak {
    /// Probability-like score in [0, 1].
    pub likelihood: f64,
    /// Growth rate of the line's live bytes.
    pub bytes_per_s: f64,
}

/// A native function under a line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NativeFrame {
    /// Demangled symbol name.
    pub symbol: String,
    /// Library file name.
    pub library: String,
    /// CPU seconds.
    pub cpu_s: f64,
}

fn is_zero_bytes(v: &u64) -> bool {
    *v == 0
}

/// CPU the profiler's own process used while it recorded (the collector: draining channels,
/// reading `/proc`, looking at waiting threads). The preload library's cost inside the
/// program is part of the program's own CPU time, not of this.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfilerCpu {
    /// User and kernel CPU seconds of the profiler's process.
    #[serde(default)]
    pub cpu_s: f64,
    /// Of it, seconds reading each process's `/proc` files (footprint, shared pages, CPU).
    #[serde(default)]
    pub proc_reads_s: f64,
    /// Of it, seconds looking at waiting threads.
    #[serde(default)]
    pub waits_s: f64,
}
