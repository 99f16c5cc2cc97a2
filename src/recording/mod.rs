//! What the collector observed during a run, as raw facts: filled by `collect` (the child's
//! exit by `launch`'s waiter) into a [`Recording`], read by the stages after it (`symbolize`,
//! `model`). Data only: nothing here reads the system or interprets, and it imports no stage,
//! so it comes first in the flow's order.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use mlprof_wire::Header;

#[cfg(test)]
pub mod build;
mod exit;
pub mod gpu;
mod gpu_calls;
mod gpu_kernels;
pub mod gpu_tensors;
pub mod mapped;
pub mod maps;

pub use exit::{ChildExit, Usage};
pub use gpu_calls::{GpuAllocEvent, GpuCalls, GpuCopyTotal, GpuFolded, GpuLaunchTotal};
pub use gpu_kernels::{GpuKernelSum, GpuKernelTotal, GpuKernels};
use maps::MappedFile;

/// Everything observed during one run.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    /// The command as given.
    pub command: Vec<String>,
    /// Nanoseconds from launch to the end of the direct child.
    pub wall_ns: u64,
    /// Process id of the direct child.
    pub child_pid: u32,
    /// How the direct child ended.
    pub exit: ChildExit,
    /// One summary per channel (per process image).
    pub channels: Vec<ChannelSummary>,
    /// What `/proc` said about each pid, last reading and maxima.
    pub procs: Vec<ProcSummary>,
    /// Tree-wide footprint at each collector tick.
    pub ticks: Vec<Tick>,
    /// Things to tell the user.
    pub warnings: Vec<String>,
    /// Host name and rank variables of the run.
    pub labels: BTreeMap<String, String>,
    /// What the NVML poller saw.
    pub gpu: gpu::GpuRecording,
    /// PyTorch's CUDA allocator traces, one per process that wrote one.
    pub gpu_tensors: Vec<gpu_tensors::TensorTrace>,
    /// How it was recorded: what the profile reports beside its figures.
    pub setup: Setup,
    /// What the profiler's own process cost while it recorded.
    pub profiler: ProfilerCost,
}

/// CPU the profiler's own process (`mlprof`: the collector and its helpers) used while it
/// recorded, and the parts of it spent reading `/proc` and looking at waiting threads. The
/// preload library's cost is not in it: it is inside the program's own CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfilerCost {
    /// User and kernel CPU of the profiler's process, from its start (ns).
    pub cpu_ns: u64,
    /// Of it, reading each process's `/proc` files (footprint, PSS, CPU time) (ns).
    pub proc_reads_ns: u64,
    /// Of it, looking at waiting threads (ns).
    pub waits_ns: u64,
}

/// How a recording was made, as its profile reports it (so that every profile made from it,
/// the run's, a snapshot's or a region's, says the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Setup {
    /// Mean bytes between allocation samples (0: none).
    pub memory_sample_bytes: u64,
    /// Mean bytes between copy samples (0: none).
    pub copy_sample_bytes: u64,
    /// CPUs the profiled program could run on (the collector's affinity, which it inherits).
    pub cpus: u32,
    /// Read from a running process from outside (`mlprof attach`), not launched.
    pub attached: bool,
}

/// One collector tick: the tree's footprint.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tick {
    /// Nanoseconds from launch.
    pub t_ns: u64,
    /// Sum of live processes' heaps.
    pub heap_bytes: u64,
    /// Sum of live processes' RSS.
    pub rss_bytes: u64,
    /// Sum of live processes' anonymous mappings (counted apart from the heap).
    pub mapped_bytes: u64,
    /// Sum of live processes' resident memory not backed by files (`statm`).
    pub anon_bytes: u64,
}

impl Tick {
    /// The memory counted at this tick: the heap, and mapped bytes as far as the resident
    /// anonymous memory beside the heap can hold them (a mapping counts when made, touched or
    /// not; allocators map capacity they never touch).
    pub fn counted_bytes(&self) -> u64 {
        let beside_heap = self.anon_bytes.saturating_sub(self.heap_bytes);
        self.heap_bytes + self.mapped_bytes.min(beside_heap)
    }
}

/// `/proc` readings of one pid.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcSummary {
    /// Process id.
    pub pid: u32,
    /// Highest RSS or VmHWM seen.
    pub peak_rss_bytes: u64,
    /// Last CPU seconds seen.
    pub cpu_s: f64,
}

/// Width of the stretches of time [`ChannelSummary::queued`] counts run-queue delay in.
pub const QUEUED_SLOT_NS: u64 = 100_000_000;

/// What one channel (one process image) reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelSummary {
    /// Process id.
    pub pid: u32,
    /// Parent pid at attach time.
    pub ppid: u32,
    /// Nanoseconds from launch when it attached.
    pub start_ns: u64,
    /// Command line.
    pub command: Vec<String>,
    /// CPython version, if any.
    pub python: Option<String>,
    /// Fork child without exec.
    pub forked: bool,
    /// Heap bytes inherited at the fork.
    pub inherited_heap: u64,
    /// Fork child: nanoseconds from launch just before the fork (its parent's clock; 0 if
    /// unknown or not a fork child).
    pub fork_ns: u64,
    /// Its place in a distributed job, from its environment (`RANK` and the like).
    pub rank: Option<Ranked>,
    /// Fork child: Python frames of the forking thread at the fork, the outermost of its
    /// stacks that it inherited (0: unknown, or not a fork child).
    pub fork_depth: u32,
    /// Exit code, if it recorded an exit.
    pub exit_code: Option<i32>,
    /// Nanoseconds from launch of the exit.
    pub exit_ns: Option<u64>,
    /// Exact heap peak.
    pub heap_peak: i64,
    /// Collector time (ns from launch) when the current peak was first seen.
    pub heap_peak_seen_ns: u64,
    /// Heap now (or at death).
    pub heap_current: i64,
    /// Bytes allocated in total.
    pub alloc_bytes: u64,
    /// Allocations.
    pub alloc_count: u64,
    /// Records read.
    pub records: u64,
    /// Records dropped by a full ring.
    pub dropped: u64,
    /// One of `mlprof_wire::python_status`.
    pub python_status: u32,
    /// How its Python objects count in the heap: one of `mlprof_wire::python_heap`.
    pub python_heap: u32,
    /// Mean CPU sampling interval (0: not sampled).
    pub sample_interval_ns: u64,
    /// CPU samples.
    pub samples: Vec<CpuSample>,
    /// Sampled allocations (those freed long before the end are in `alloc_groups`).
    pub allocs: Vec<AllocSample>,
    /// Sampled allocations freed long before the end, folded per thread, flags and frames.
    pub alloc_groups: Vec<AllocGroup>,
    /// Sampled copies.
    pub copies: Vec<CopySample>,
    /// Width of the windows that events older than a few seconds were merged into, each at
    /// its window's start (0: none were; `collect::compact`).
    pub window_ns: u64,
    /// CPU samples (not waiting ones) merged into others there: `samples` holds this many
    /// fewer than were taken.
    pub merged_cpu_samples: u64,
    /// Heap peak marks: (ns from launch, heap bytes).
    pub peak_marks: Vec<(u64, u64)>,
    /// Code objects sent by this image, by id.
    pub codes: BTreeMap<u32, CodeInfo>,
    /// Threads seen: (tid, pthread_self).
    pub threads: Vec<(u32, u64)>,
    /// Time each thread was runnable but waited for a CPU (the kernel's run-queue delay,
    /// `schedstat`, read at the collector's looks at Python processes), per
    /// [`QUEUED_SLOT_NS`] of time: (slot start in ns from launch, tid, ns waited).
    pub queued: Vec<(u64, u32, u64)>,
    /// The image's memory map, last read while it ran (for native symbols).
    pub maps: Vec<MappedFile>,
    /// Address of `_PyRuntime` (0: Python frames not walked).
    pub py_runtime: u64,
    /// Address of `PyCode_Type`.
    pub py_code_type: u64,
    /// Collector time (ns from launch) of the last off-CPU look at this process.
    pub last_wait_ns: u64,
    /// Still running when collection stopped (it outlived the command and the wait).
    pub still_running: bool,
    /// Regions the program marked itself (`mlprof.mark`, pytest tests), in begin order.
    pub regions: Vec<RegionSpan>,
    /// Anonymous mappings the program made itself, apart from the heap.
    pub mapped: MappedMemory,
    /// Its CUDA runtime calls (empty without CUDA).
    pub gpu_calls: GpuCalls,
    /// Code its interpreter compiled itself (CPython's JIT), in the order made.
    pub interpreter_code: Vec<InterpreterCode>,
}

/// Memory a process's interpreter made executable for its own JIT's code: time there is the
/// interpreter's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterpreterCode {
    /// First byte.
    pub start: u64,
    /// Past the last byte.
    pub end: u64,
    /// When it was made executable (ns from launch).
    pub from_ns: u64,
    /// When it was unmapped (ns from launch), if it was.
    pub until_ns: Option<u64>,
}

impl ChannelSummary {
    /// Whether `ip` was in code of its interpreter's JIT at `t_ns`.
    pub fn in_interpreter_code(&self, ip: u64, t_ns: u64) -> bool {
        self.interpreter_code.iter().any(|c| {
            (c.start..c.end).contains(&ip)
                && c.from_ns <= t_ns
                && c.until_ns.is_none_or(|u| t_ns <= u)
        })
    }
}

/// A process's place in a distributed job (`mlprof_wire::RANK_VARIABLES`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ranked {
    /// Its rank.
    pub rank: u32,
    /// Its rank on its node, if the launcher said.
    pub local_rank: Option<u32>,
    /// The number of ranks, if the launcher said.
    pub world_size: Option<u32>,
}

impl Ranked {
    /// From the header's fields (-1: not set); `None` without a rank. Values a real launcher
    /// cannot give (beyond a million ranks) are dropped.
    pub fn from_header(rank: i32, local_rank: i32, world_size: i32) -> Option<Ranked> {
        let valid = |v: i32| u32::try_from(v).ok().filter(|&v| v < 1 << 20);
        Some(Ranked {
            rank: valid(rank)?,
            local_rank: valid(local_rank),
            world_size: valid(world_size),
        })
    }
}

/// Anonymous mappings a process made itself (`mmap` and `mremap` outside the malloc family):
/// exact counters from its header, and the sampled mappings that matter for the lines holding
/// them at their peak (`docs/design/mapped-memory.md`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MappedMemory {
    /// Highest bytes mapped at once (exact).
    pub peak: u64,
    /// Bytes mapped now, or at the process's end.
    pub current: u64,
    /// Bytes mapped in total.
    pub total: u64,
    /// Mappings made.
    pub count: u64,
    /// New highs: (ns from launch, bytes mapped), rising.
    pub marks: Vec<(u64, u64)>,
    /// Sampled mappings (flag `MAPPED`), with their unmapping time; those unmapped before the
    /// last mark are dropped once many are held (they can no longer be held at a peak).
    pub mappings: Vec<AllocSample>,
}

impl MappedMemory {
    /// The counters alone.
    pub fn counters(&self) -> MappedMemory {
        MappedMemory {
            marks: Vec::new(),
            mappings: Vec::new(),
            ..*self
        }
    }
}

impl ChannelSummary {
    /// The CPU its CPU samples hold (their weights; waiting samples left out), in ns.
    pub fn sampled_cpu_ns(&self) -> u64 {
        self.samples
            .iter()
            .filter(|s| s.flags & mlprof_wire::sample_flags::WAITING == 0)
            .map(|s| s.weight_ns)
            .sum()
    }

    /// A copy without the sampled events and regions (everything else: identity, counters,
    /// code objects, threads, maps), for a view that keeps only some events.
    pub fn without_events(&self) -> ChannelSummary {
        ChannelSummary {
            codes: self.codes.clone(),
            ..self.without_events_or_codes()
        }
    }

    /// A copy without the sampled events, regions and code objects (for a cut that keeps
    /// only the code objects its events name).
    pub fn without_events_or_codes(&self) -> ChannelSummary {
        ChannelSummary {
            pid: self.pid,
            ppid: self.ppid,
            start_ns: self.start_ns,
            command: self.command.clone(),
            python: self.python.clone(),
            forked: self.forked,
            inherited_heap: self.inherited_heap,
            fork_ns: self.fork_ns,
            fork_depth: self.fork_depth,
            rank: self.rank,
            exit_code: self.exit_code,
            exit_ns: self.exit_ns,
            heap_peak: self.heap_peak,
            heap_peak_seen_ns: self.heap_peak_seen_ns,
            heap_current: self.heap_current,
            alloc_bytes: self.alloc_bytes,
            alloc_count: self.alloc_count,
            records: self.records,
            dropped: self.dropped,
            python_status: self.python_status,
            python_heap: self.python_heap,
            sample_interval_ns: self.sample_interval_ns,
            samples: Vec::new(),
            allocs: Vec::new(),
            alloc_groups: Vec::new(),
            copies: Vec::new(),
            window_ns: self.window_ns,
            merged_cpu_samples: 0,
            peak_marks: Vec::new(),
            codes: BTreeMap::new(),
            threads: self.threads.clone(),
            queued: Vec::new(),
            maps: self.maps.clone(),
            interpreter_code: self.interpreter_code.clone(),
            py_runtime: self.py_runtime,
            py_code_type: self.py_code_type,
            last_wait_ns: self.last_wait_ns,
            still_running: self.still_running,
            regions: Vec::new(),
            mapped: self.mapped.counters(),
            gpu_calls: GpuCalls::default(),
        }
    }
}

/// An event at a moment of the run, for views cut to a stretch of it (a region, a snapshot's
/// recent part).
pub trait Timed: Clone {
    /// Nanoseconds from launch.
    fn t_ns(&self) -> u64;
    /// A copy as seen from a stretch ending at `to` whose times count from `from`.
    fn cut(&self, from: u64, to: u64) -> Self;
}

impl Timed for CpuSample {
    fn t_ns(&self) -> u64 {
        self.t_ns
    }
    fn cut(&self, from: u64, _to: u64) -> Self {
        CpuSample {
            t_ns: self.t_ns.saturating_sub(from),
            ..self.clone()
        }
    }
}

impl Timed for CopySample {
    fn t_ns(&self) -> u64 {
        self.t_ns
    }
    fn cut(&self, from: u64, _to: u64) -> Self {
        CopySample {
            t_ns: self.t_ns.saturating_sub(from),
            ..self.clone()
        }
    }
}

impl Timed for AllocSample {
    fn t_ns(&self) -> u64 {
        self.t_ns
    }
    /// Freed after `to`: not freed within the stretch.
    fn cut(&self, from: u64, to: u64) -> Self {
        AllocSample {
            t_ns: self.t_ns.saturating_sub(from),
            freed_ns: self
                .freed_ns
                .filter(|&f| f <= to)
                .map(|f| f.saturating_sub(from)),
            cut_ns: self.cut_ns.map(|c| c.saturating_sub(from)),
            ..self.clone()
        }
    }
}

/// The events from `from` to `to` (ns from launch, inclusive), cut to that stretch
/// ([`Timed::cut`]; `shift`: times count from `from`, else they stay from launch).
pub fn between<T: Timed>(events: &[T], from: u64, to: u64, shift: bool) -> Vec<T> {
    let origin = if shift { from } else { 0 };
    events
        .iter()
        .filter(|e| (from..=to).contains(&e.t_ns()))
        .map(|e| e.cut(origin, to))
        .collect()
}

/// A region the program marked itself: its exact heap figures come from the preload library's
/// counters at its begin and end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegionSpan {
    /// Id, unique in the process image.
    pub id: u64,
    /// The name the program gave it.
    pub name: String,
    /// Thread that opened it.
    pub tid: u32,
    /// Nanoseconds from launch of the begin.
    pub begin_ns: u64,
    /// Of the end (`None`: still open, or the process died inside it).
    pub end_ns: Option<u64>,
    /// Exact heap at the begin.
    pub heap_begin: i64,
    /// Exact heap at the end.
    pub heap_end: Option<i64>,
    /// Exact highest heap between begin and end (as of the last record).
    pub peak: i64,
    /// New highs inside the region: (ns from launch, heap bytes), rising.
    pub peak_marks: Vec<(u64, i64)>,
    /// What the program asked of the collector at the end (`mlprof_wire::region_report`).
    pub report: u8,
}

/// One CPU sample: a thread burned `weight_ns` of CPU ending at `t_ns`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuSample {
    /// Nanoseconds from launch.
    pub t_ns: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// Interrupted instruction pointer.
    pub ip: u64,
    /// CPU nanoseconds this sample stands for.
    pub weight_ns: u64,
    /// `mlprof_wire::sample_flags`.
    pub flags: u32,
    /// Python frames, innermost first: (code id, instruction offset in code units).
    pub frames: Vec<(u32, i32)>,
    /// For a sample in libc or libm: the return address into their caller (0: none).
    pub caller: u64,
    /// Part of `weight_ns` the kernel spent on the thread's page faults (system time).
    pub fault_ns: u64,
}

/// A sampled allocation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocSample {
    /// Nanoseconds from launch.
    pub t_ns: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// Address of the block.
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes this sample stands for.
    pub weight: u64,
    /// `mlprof_wire::alloc_flags`.
    pub flags: u32,
    /// Python frames, innermost first.
    pub frames: Vec<(u32, i32)>,
    /// When it was freed (ns from launch), if it was.
    pub freed_ns: Option<u64>,
    /// For what is left of a sampled mapping cut in part: when it was cut. It is held from
    /// then on; `t_ns`, `tid` and `frames` stay the mapping's own, which its line is found by.
    pub cut_ns: Option<u64>,
}

impl AllocSample {
    /// Whether it was live at `t_ns`.
    pub fn live_at(&self, t_ns: u64) -> bool {
        self.cut_ns.unwrap_or(self.t_ns) <= t_ns && self.freed_ns.is_none_or(|f| f > t_ns)
    }
}

/// Sampled allocations of one thread with the same flags and frames, all freed, folded
/// together (`collect::compact`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocGroup {
    /// Kernel thread id.
    pub tid: u32,
    /// `mlprof_wire::alloc_flags`.
    pub flags: u32,
    /// Python frames, innermost first.
    pub frames: Vec<(u32, i32)>,
    /// Sampled allocations folded in.
    pub count: u64,
    /// Bytes they stand for.
    pub weight: u64,
    /// Time of the first one (ns from launch).
    pub first_ns: u64,
    /// Time of the last one (ns from launch).
    pub last_ns: u64,
    /// Number of the process's peak marks when `held_at_peak` was last computed: it counts
    /// only if no later mark came.
    pub peak_marks: usize,
    /// Bytes live at that peak (allocated before it, freed after it).
    pub held_at_peak: u64,
    /// Changes of the live bytes: (window start in ns from launch, bytes), in time order.
    pub changes: Vec<(u64, i64)>,
}

/// A sampled copy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CopySample {
    /// Nanoseconds from launch.
    pub t_ns: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// Bytes copied by this call.
    pub bytes: u64,
    /// Bytes this sample stands for.
    pub weight: u64,
    /// Python frames, innermost first.
    pub frames: Vec<(u32, i32)>,
}

/// A code object as the process described it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CodeInfo {
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11+) or `co_name`.
    pub qualname: String,
    /// Raw line table (`co_lnotab` on 3.9, `co_linetable` after).
    pub linetable: Vec<u8>,
    /// String kind of the file name as sent (1, 2, 4).
    pub filename_kind: u8,
    /// String kind of the qualified name as sent.
    pub qualname_kind: u8,
    /// Address of the code object in the process.
    pub address: u64,
}

impl ChannelSummary {
    /// The identity part of a channel header.
    pub fn from_header(h: &Header, launch_ns: u64) -> ChannelSummary {
        let len = (h.cmdline_len as usize).min(h.cmdline.len());
        // NUL-terminated arguments: drop only the empty piece after the final NUL.
        let raw = h.cmdline[..len]
            .strip_suffix(&[0])
            .unwrap_or(&h.cmdline[..len]);
        let command = if raw.is_empty() {
            Vec::new()
        } else {
            raw.split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        };
        let version_len = h.python_version.iter().position(|&b| b == 0).unwrap_or(0);
        let python = (version_len > 0)
            .then(|| String::from_utf8_lossy(&h.python_version[..version_len]).into_owned());
        ChannelSummary {
            pid: h.pid,
            ppid: h.ppid,
            start_ns: h.start_ns.saturating_sub(launch_ns),
            command,
            python,
            forked: h.forked != 0,
            inherited_heap: h.inherited_heap,
            fork_ns: h.fork_ns.saturating_sub(launch_ns),
            rank: Ranked::from_header(h.rank, h.local_rank, h.world_size),
            python_status: h.python_status.load(Ordering::Relaxed),
            python_heap: h.python_heap.load(Ordering::Relaxed),
            sample_interval_ns: h.sample_interval_ns.load(Ordering::Relaxed) as u64,
            ..ChannelSummary::default()
        }
    }
}
