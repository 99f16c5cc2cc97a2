//! Sections of a [`super::Profile`] that rules outside attribution fill: hints (drawn by the
//! pipeline's rules from a finished profile), budget verdicts (the gate's) and regions
//! (summarised from the recording). The types live here, beside the profile they belong to, so
//! that the model's contract does not import the rules that make them.

use serde::{Deserialize, Serialize};

use super::profile::GpuLineCalls;

/// One suggestion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hint {
    /// The rule that drew it.
    pub kind: HintKind,
    /// The line it is about (absent for a process-wide hint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Line number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Enclosing function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Source text of the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The process it is about, for a process-wide hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The figure that triggered it, in words (`"copies 1.2 GiB, allocates 1.2 GiB"`).
    pub evidence: String,
    /// What to do, in one or two sentences.
    pub suggestion: String,
    /// Bytes the suggestion would save (of the peak, or of copies, as `evidence` says), at
    /// most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saving_bytes: Option<u64>,
    /// Seconds it would save, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saving_s: Option<f64>,
    /// The saving in words.
    pub saving: String,
}

/// The rule a [`Hint`] comes from, named in the profile as the schema lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HintKind {
    /// A line that copies about as much as it allocates (`"copies"`).
    #[default]
    Copies,
    /// Large float64 arrays held at the peak (`"float64"`).
    Float64,
    /// A line whose live bytes keep rising (`"growing"`).
    Growing,
    /// Many small Python objects held (`"python_objects"`).
    PythonObjects,
    /// An ONNX Runtime arena kept after a large input (`"onnx_arena"`).
    OnnxArena,
    /// More pool threads than the run's CPUs (`"threads"`).
    Threads,
    /// Fork workers inheriting a large heap (`"fork_inherits"`).
    ForkInherits,
    /// A line standing waiting for the GPU a large share of the run (`"gpu_wait"`).
    GpuWait,
    /// A line copying a large volume from host to device (`"gpu_copies"`).
    GpuCopies,
    /// A line pinning host memory again and again and keeping it (`"pinned_growth"`).
    PinnedGrowth,
    /// A line copying arrays element by element a large share of the run
    /// (`"element_copies"`).
    ElementCopies,
    /// A line whose thread pools spin and wait at barriers much of its native time
    /// (`"spin"`).
    Spin,
    /// A line launching many kernels too small to keep the GPU busy: the CPU takes longer to
    /// launch them than the GPU to run them (`"small_kernels"`).
    SmallKernels,
    /// A line whose tensors on the GPU pile up step after step until the peak
    /// (`"gpu_growing"`).
    GpuGrowing,
    /// A device whose caching allocator held much more than its tensors at the peak
    /// (`"gpu_cache_slack"`).
    GpuCacheSlack,
}

impl HintKind {
    /// The name the profile gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            HintKind::Copies => "copies",
            HintKind::Float64 => "float64",
            HintKind::Growing => "growing",
            HintKind::PythonObjects => "python_objects",
            HintKind::OnnxArena => "onnx_arena",
            HintKind::Threads => "threads",
            HintKind::ForkInherits => "fork_inherits",
            HintKind::GpuWait => "gpu_wait",
            HintKind::GpuCopies => "gpu_copies",
            HintKind::PinnedGrowth => "pinned_growth",
            HintKind::ElementCopies => "element_copies",
            HintKind::Spin => "spin",
            HintKind::SmallKernels => "small_kernels",
            HintKind::GpuGrowing => "gpu_growing",
            HintKind::GpuCacheSlack => "gpu_cache_slack",
        }
    }
}

/// One exceeded budget (`gate`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    /// Which limit.
    pub budget: Budget,
    /// The limit and what was measured, in the budget's unit.
    #[serde(flatten)]
    pub amount: Amount,
    /// One line for people: `budget exceeded: peak heap 7.1 GiB > 6.0 GiB (train.py:88 held ...)`.
    pub message: String,
    /// Where it shows in the source (the line, or the biggest holder), if anywhere.
    #[serde(default)]
    pub file: Option<String>,
    /// The line in `file`.
    #[serde(default)]
    pub line: Option<u32>,
}

/// The limit a [`Violation`] exceeded, named in the profile as the schema lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// `max-peak`: the tree's peak heap.
    PeakHeap,
    /// `max-rss`: the tree's peak RSS.
    PeakRss,
    /// `max-gpu-memory`: the peak GPU memory (also when it could not be checked).
    PeakGpuMemory,
    /// `max-gpu-reserved`: device memory one process held through its CUDA calls, per device
    /// (also when no call was seen).
    GpuReserved,
    /// `max-gpu-allocated`: bytes of tensors one process had allocated at once on one device
    /// (also when no allocator was traced).
    GpuAllocated,
    /// A budget file's `[gpu-lines]` entry: bytes of tensors a line held at the GPU peak.
    GpuLine,
    /// `max-leak`: the bytes of likely leaks.
    Leaks,
    /// `max-copy`: the bytes copied.
    Copy,
    /// `max-cpu`: the tree's CPU seconds (its amount in seconds, [`Amount::Seconds`]).
    Cpu,
    /// A budget file's `[lines]` entry: bytes a line held at the peak.
    Line,
    /// A budget file's `[functions]` entry.
    Function,
    /// A budget file's `[files]` entry.
    File,
    /// `--baseline`: the peak heap grew.
    BaselinePeakHeap,
    /// `--baseline`: a line's bytes grew.
    BaselineLine,
}

impl Budget {
    /// The name the profile gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::PeakHeap => "peak_heap",
            Budget::PeakRss => "peak_rss",
            Budget::PeakGpuMemory => "peak_gpu_memory",
            Budget::GpuReserved => "gpu_reserved",
            Budget::GpuAllocated => "gpu_allocated",
            Budget::GpuLine => "gpu_line",
            Budget::Leaks => "leaks",
            Budget::Copy => "copy",
            Budget::Cpu => "cpu",
            Budget::Line => "line",
            Budget::Function => "function",
            Budget::File => "file",
            Budget::BaselinePeakHeap => "baseline_peak_heap",
            Budget::BaselineLine => "baseline_line",
        }
    }
}

/// A [`Violation`]'s limit and measure, each in its budget's own unit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    /// Bytes (every budget but `cpu`; a baseline's are its bytes and this run's;
    /// `actual_bytes` 0 for a GPU budget that could not be checked).
    Bytes {
        /// The limit.
        limit_bytes: u64,
        /// What was measured.
        actual_bytes: u64,
    },
    /// CPU seconds of the tree (`cpu`).
    Seconds {
        /// The limit.
        limit_s: f64,
        /// What was measured.
        actual_s: f64,
    },
}

/// One region of the program's marking, summarised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Region {
    /// The name the program gave it (a pytest node id for tests).
    pub name: String,
    /// The process that marked it.
    pub pid: u32,
    /// Seconds from launch of its begin.
    pub start_s: f64,
    /// Seconds from begin to end (to the end of the run if it never ended).
    pub duration_s: f64,
    /// Whether it ended (false: the process died or the run ended inside it).
    pub ended: bool,
    /// Exact heap of its process when it began.
    pub heap_start_bytes: u64,
    /// Exact: the highest heap of its process inside the region, above `heap_start_bytes`.
    pub peak_bytes: u64,
    /// Exact: heap at its end minus heap at its begin (negative: it freed more than it kept).
    pub end_bytes: i64,
    /// Highest heap of the processes it started (their own allocations, not what a fork child
    /// inherited), summed; 0 if it started none.
    pub children_peak_bytes: u64,
    /// CPU seconds interpreting Python inside it (its process and those it started).
    pub cpu_python_s: f64,
    /// CPU seconds in native code.
    pub cpu_native_s: f64,
    /// Seconds waiting (by the run's idle convention).
    #[serde(alias = "cpu_system_s")]
    pub waiting_s: f64,
    /// CPU seconds the kernel spent on page faults inside it.
    #[serde(default)]
    pub kernel_s: f64,
    /// Lines whose allocations made inside the region were live at its peak, largest first
    /// (sampled; at most [`super::regions::TOP_LINES`]).
    pub held_at_peak: Vec<RegionLine>,
    /// Lines whose allocations made inside the region were still live at its end.
    pub held_at_end: Vec<RegionLine>,
    /// What the CUDA calls made inside it did (its process's and those it started), exact:
    /// the sums of its lines' `gpu_*` figures, `gpu_peak_bytes` the highest device memory
    /// held through calls made inside it (each device's, summed), pinned memory held at its
    /// end; zeros left out of the JSON.
    #[serde(flatten)]
    pub gpu_calls: GpuLineCalls,
    /// Tensors on the GPU, by PyTorch's allocator trace (exact; 0 without one): bytes its
    /// process and those it started held allocated when it began (each device's, summed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_tensor_start_bytes: u64,
    /// The most bytes of tensors they held at once inside it, above `gpu_tensor_start_bytes`
    /// (each device at its own highest, summed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_tensor_peak_bytes: u64,
    /// Lines whose tensors made inside it were live at that highest, largest first (exact; at
    /// most [`super::regions::TOP_LINES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_tensors_at_peak: Vec<RegionLine>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A line and the bytes it held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RegionLine {
    /// Source file.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// Qualified function name.
    pub function: String,
    /// Bytes (sampled estimate; exact for GPU tensors).
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names `as_str` gives are the ones serde writes into the profile.
    #[test]
    fn names_are_the_profiles() {
        let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        for kind in [
            HintKind::Copies,
            HintKind::Float64,
            HintKind::Growing,
            HintKind::PythonObjects,
            HintKind::OnnxArena,
            HintKind::Threads,
            HintKind::ForkInherits,
            HintKind::GpuWait,
            HintKind::GpuCopies,
            HintKind::PinnedGrowth,
            HintKind::ElementCopies,
            HintKind::Spin,
            HintKind::SmallKernels,
            HintKind::GpuGrowing,
            HintKind::GpuCacheSlack,
        ] {
            assert_eq!(name(serde_json::to_value(kind).unwrap()), kind.as_str());
        }
        for budget in [
            Budget::PeakHeap,
            Budget::PeakRss,
            Budget::PeakGpuMemory,
            Budget::Leaks,
            Budget::Copy,
            Budget::Cpu,
            Budget::Line,
            Budget::Function,
            Budget::File,
            Budget::BaselinePeakHeap,
            Budget::BaselineLine,
        ] {
            assert_eq!(name(serde_json::to_value(budget).unwrap()), budget.as_str());
        }
    }

    /// A byte budget's verdict keeps its JSON; a CPU budget's is in seconds.
    #[test]
    fn each_amount_is_written_in_its_unit_and_read_back() {
        let bytes = Violation {
            budget: Budget::Line,
            amount: Amount::Bytes {
                limit_bytes: 1 << 20,
                actual_bytes: 2 << 20,
            },
            message: "m".into(),
            file: Some("a.py".into()),
            line: Some(3),
        };
        let text = serde_json::to_string(&bytes).unwrap();
        assert_eq!(
            text,
            r#"{"budget":"line","limit_bytes":1048576,"actual_bytes":2097152,"message":"m","file":"a.py","line":3}"#
        );
        assert_eq!(serde_json::from_str::<Violation>(&text).unwrap(), bytes);
        let cpu = Violation {
            budget: Budget::Cpu,
            amount: Amount::Seconds {
                limit_s: 1.5,
                actual_s: 10.0,
            },
            message: "m".into(),
            file: None,
            line: None,
        };
        let text = serde_json::to_string(&cpu).unwrap();
        assert_eq!(
            text,
            r#"{"budget":"cpu","limit_s":1.5,"actual_s":10.0,"message":"m","file":null,"line":null}"#
        );
        assert_eq!(serde_json::from_str::<Violation>(&text).unwrap(), cpu);
        // A profile from before the seconds: its zero bytes still read.
        let old = r#"{"budget":"cpu","limit_bytes":0,"actual_bytes":0,"message":"m"}"#;
        let read: Violation = serde_json::from_str(old).unwrap();
        assert_eq!(
            read.amount,
            Amount::Bytes {
                limit_bytes: 0,
                actual_bytes: 0
            }
        );
    }
}
