//! Sections of a [`super::Profile`] that rules outside attribution fill: hints (drawn by the
//! pipeline's rules from a finished profile) and regions (summarised from the recording). The
//! types live here, beside the profile they belong to, so that the model's contract does not
//! import the rules that make them.

use serde::{Deserialize, Serialize};

/// One suggestion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hint {
    /// The rule: `"copies"`, `"float64"`, `"growing"`, `"python_objects"`, `"onnx_arena"`,
    /// `"threads"`, `"fork_inherits"`.
    pub kind: String,
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
    pub cpu_system_s: f64,
    /// Lines whose allocations made inside the region were live at its peak, largest first
    /// (sampled; at most [`super::regions::TOP_LINES`]).
    pub held_at_peak: Vec<RegionLine>,
    /// Lines whose allocations made inside the region were still live at its end.
    pub held_at_end: Vec<RegionLine>,
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
    /// Bytes (sampled estimate).
    pub bytes: u64,
}
