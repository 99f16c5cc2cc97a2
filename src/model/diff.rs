//! Two profiles compared (`mlprof diff`, and the gate's `--baseline`): lines and functions
//! matched across edits, each figure's change set against a noise floor derived from how it
//! was sampled, so that a difference the sampling alone could make is not shown as a change.
//!
//! Only real lines and functions are compared: the pseudo-lines at line 0 (interpreter
//! start-up, code outside the profiled files, native threads) are summaries, not code.
//!
//! Matching: a line is the same line in both runs when its file (the last two path
//! components, so checkouts in different directories match), function and source text (trimmed)
//! are the same, the n-th such line in one run pairing with the n-th in the other (line numbers
//! move when code above is edited). A line left over in both runs at the same file and number,
//! in the same function, is the same line edited. Functions are matched by file and name.
//!
//! Noise (see `docs/design/diff.md`): a byte figure estimated from Poisson byte sampling with
//! mean `M` has standard error `sqrt(B * M)`; a time made of samples `T` apart has standard
//! error `sqrt(t * T)`. A change is meaningful when it exceeds four standard errors of the
//! difference, a relative margin for what varies between two runs of the same program (2 % of
//! bytes, 25 % of time) and a floor (4 `M` of bytes, two samples of time).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{FunctionStats, LineStats, Measures, Profile};

/// Schema identifier of a diff document.
pub const SCHEMA: &str = "mlprof-diff/1";

/// Standard errors a change must exceed. Four, not three: a diff tests every figure of every
/// line (hundreds of tests in a real program), and at three one of them would pass by chance
/// every few runs (seen: a quickstart line's allocations flagged between two unchanged runs).
const SIGMAS: f64 = 4.0;
/// Relative change of bytes always within noise (allocator and hash-order variation).
const BYTES_MARGIN: f64 = 0.02;
/// Relative change of time always within noise: two runs of the same program on a shared
/// machine differ this much (page faults, frequency, other load), beyond sampling error.
const TIME_MARGIN: f64 = 0.25;
/// Mean sampling intervals assumed for a profile that does not say: the defaults.
use crate::launch::{
    DEFAULT_COPY_SAMPLE_BYTES as DEFAULT_COPY_SAMPLE,
    DEFAULT_MEMORY_SAMPLE_BYTES as DEFAULT_MEMORY_SAMPLE,
};
/// A change of an exact run-wide heap figure at most this is within noise: CPython's
/// small-object allocator counts in arenas (1 MiB from 3.10), and hash randomisation
/// (`PYTHONHASHSEED`) moves small objects enough between two runs of the same program to take
/// one arena more (growth.py: +1 MiB at seed 3 of 12); two arenas are within noise.
const ARENAS_FLOOR: u64 = 2 << 20;
/// GPU memory changes below this are within the polling's noise.
const GPU_FLOOR: u64 = 8 << 20;
/// A line's GPU time changes by at least this much before it is a change (1 ms) ...
const GPU_TIME_FLOOR_S: f64 = 0.001;
/// ... and by more than this share of the larger run's (a kernel's device time varies a few
/// percent from run to run; a shared kernel's split between lines is sampled).
const GPU_TIME_SHARE: f64 = 0.1;

/// Two runs compared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The run compared against.
    pub base: Run,
    /// The run compared.
    pub new: Run,
    /// The whole run's figures.
    pub memory: Totals,
    /// Lines with at least one meaningful change, largest first (by peak-held bytes, then
    /// allocated bytes, copied bytes, time).
    pub lines: Vec<LineDiff>,
    /// Functions with at least one meaningful change, in the same order.
    pub functions: Vec<LineDiff>,
    /// Lines compared whose changes are all within noise.
    pub unchanged_lines: usize,
    /// Functions compared whose changes are all within noise.
    pub unchanged_functions: usize,
}

/// One side of the comparison.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Where the profile was read from (as given).
    pub path: String,
    /// The profiled command.
    pub command: Vec<String>,
    /// Exit code (absent when killed by a signal).
    pub exit_code: Option<i32>,
    /// Signal that ended it, if any.
    pub exit_signal: Option<i32>,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Mean bytes between allocation samples the noise floor assumed.
    pub memory_sample_bytes: u64,
    /// Mean seconds between CPU samples.
    pub sample_interval_s: f64,
}

/// A run-wide figure in both runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// In the base run.
    pub base: f64,
    /// In the new run.
    pub new: f64,
    /// `new - base`.
    pub delta: f64,
    /// Whether the change is beyond noise.
    pub meaningful: bool,
}

/// The run-wide figures compared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// The tree's peak heap (exact counters: any change of 1 MiB and 1 % is meaningful).
    pub peak_heap_bytes: Change,
    /// The tree's peak RSS (meaningful beyond 5 % and 4 MiB).
    pub peak_rss_bytes: Change,
    /// The tree's peak of anonymous mappings.
    pub peak_mapped_bytes: Change,
    /// Bytes allocated by the tree (exact counters).
    pub alloc_bytes: Change,
    /// Peak GPU memory of the profiled processes.
    pub peak_gpu_memory_bytes: Change,
    /// Wall-clock seconds (meaningful beyond 25 %).
    pub wall_s: Change,
}

/// What a line or function measured in one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Bytes held at the heap peak.
    pub peak_bytes: u64,
    /// Bytes allocated.
    pub alloc_bytes: u64,
    /// Bytes copied.
    pub copy_bytes: u64,
    /// Anonymous mappings held at the mappings' peak.
    pub mapped_peak_bytes: u64,
    /// Python + native + waiting seconds (the report's "time").
    pub cpu_s: f64,
    /// Seconds interpreting Python.
    pub cpu_python_s: f64,
    /// Seconds in native code.
    pub cpu_native_s: f64,
    /// Seconds waiting off-CPU.
    #[serde(alias = "cpu_system_s")]
    pub waiting_s: f64,
    /// GPU memory growth while it ran.
    pub gpu_memory_bytes: u64,
    /// Device memory its CUDA calls held at its process's GPU peak (exact).
    #[serde(default)]
    pub gpu_peak_bytes: u64,
    /// Bytes its CUDA calls copied between host and device, any direction (exact).
    #[serde(default)]
    pub gpu_copy_bytes: u64,
    /// Device seconds of the kernels it launched (CUPTI's GPU time).
    #[serde(default)]
    pub gpu_kernel_s: f64,
    /// Bytes of its PyTorch tensors live at its process's GPU peak (the allocator's trace).
    #[serde(default)]
    pub gpu_tensor_peak_bytes: u64,
}

impl Figures {
    fn of(m: &Measures) -> Figures {
        Figures {
            peak_bytes: m.peak_bytes,
            alloc_bytes: m.alloc_bytes,
            copy_bytes: m.copy_bytes,
            mapped_peak_bytes: m.mapped_peak_bytes,
            cpu_s: m.time_s(),
            cpu_python_s: m.cpu_python_s,
            cpu_native_s: m.cpu_native_s,
            waiting_s: m.waiting_s,
            gpu_memory_bytes: m.gpu_memory_bytes,
            gpu_peak_bytes: m.gpu_calls.gpu_peak_bytes,
            gpu_copy_bytes: m.gpu_calls.gpu_h2d_bytes
                + m.gpu_calls.gpu_d2h_bytes
                + m.gpu_calls.gpu_d2d_bytes,
            gpu_kernel_s: m.gpu_calls.gpu_kernel_s,
            gpu_tensor_peak_bytes: m.gpu_tensor_peak_bytes,
        }
    }
}

/// How a line (or function) of one run was matched in the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LineStatus {
    /// In both, with the same source text (`"changed"`, whether or not its figures changed).
    #[default]
    Changed,
    /// At the same place in both, with other source text (`"edited"`).
    Edited,
    /// Only in the new run (`"new"`).
    New,
    /// Only in the base run (`"gone"`).
    Gone,
}

impl LineStatus {
    /// The name the diff document gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            LineStatus::Changed => "changed",
            LineStatus::Edited => "edited",
            LineStatus::New => "new",
            LineStatus::Gone => "gone",
        }
    }
}

/// A line (or function) in both runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LineDiff {
    /// Source file (as the new run names it; the base run's for a line that is gone).
    pub file: String,
    /// Line number in the new run (the function's first line, for functions); the base run's
    /// for a line that is gone.
    pub line: u32,
    /// Line number in the base run, when it was there.
    pub base_line: Option<u32>,
    /// Enclosing function.
    pub function: String,
    /// Source text (new run's).
    pub source: String,
    /// How it was matched ([`LineStatus`]).
    pub status: LineStatus,
    /// Change of bytes held at the heap peak.
    pub peak_bytes_delta: i64,
    /// Change of bytes allocated.
    pub alloc_bytes_delta: i64,
    /// Change of bytes copied.
    pub copy_bytes_delta: i64,
    /// Change of mapped bytes held.
    pub mapped_peak_bytes_delta: i64,
    /// Change of time (Python + native + waiting).
    pub cpu_s_delta: f64,
    /// Change of Python time.
    pub cpu_python_s_delta: f64,
    /// Change of native time.
    pub cpu_native_s_delta: f64,
    /// Change of waiting time.
    #[serde(alias = "cpu_system_s_delta")]
    pub waiting_s_delta: f64,
    /// Change of GPU memory growth.
    pub gpu_memory_bytes_delta: i64,
    /// Change of device memory held at the GPU peak through CUDA calls (exact: any change is
    /// meaningful).
    #[serde(default)]
    pub gpu_peak_bytes_delta: i64,
    /// Change of bytes copied between host and device through CUDA calls (exact).
    #[serde(default)]
    pub gpu_copy_bytes_delta: i64,
    /// Change of GPU time (device seconds of the kernels it launched).
    #[serde(default)]
    pub gpu_kernel_s_delta: f64,
    /// Change of its tensors at the GPU peak (the allocator's trace: exact, any change is
    /// meaningful).
    #[serde(default)]
    pub gpu_tensor_peak_bytes_delta: i64,
    /// Which of the deltas are beyond noise (`"peak_bytes"`, `"alloc_bytes"`, `"copy_bytes"`,
    /// `"mapped_peak_bytes"`, `"cpu_s"`, `"gpu_memory_bytes"`, `"gpu_peak_bytes"`,
    /// `"gpu_copy_bytes"`, `"gpu_kernel_s"`, `"gpu_tensor_peak_bytes"`).
    pub meaningful: Vec<String>,
    /// The noise floor each figure's delta was held against (same names, bytes or seconds).
    pub noise: Noise,
    /// The base run's figures (zeros for a new line).
    pub base: Figures,
    /// The new run's figures (zeros for a line that is gone).
    pub new: Figures,
}

/// Noise floors of one line's deltas.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    /// Bytes held at the peak.
    pub peak_bytes: u64,
    /// Bytes allocated.
    pub alloc_bytes: u64,
    /// Bytes copied.
    pub copy_bytes: u64,
    /// Mapped bytes held (same sampling as allocations).
    pub mapped_peak_bytes: u64,
    /// Seconds of time.
    pub cpu_s: f64,
    /// Seconds of GPU time: a kernel's device time varies from run to run (clocks, other
    /// work on the device) and a line's share of a kernel shared between lines is sampled.
    #[serde(default)]
    pub gpu_kernel_s: f64,
}

/// How each run sampled, for the noise floors.
#[derive(Clone, Copy)]
struct Sampling {
    memory: f64,
    copy: f64,
    interval: f64,
}

impl Sampling {
    fn of(p: &Profile) -> Sampling {
        let or = |v: u64, d: u64| if v > 0 { v } else { d } as f64;
        Sampling {
            memory: or(p.memory_sample_bytes, DEFAULT_MEMORY_SAMPLE),
            copy: or(p.copy_sample_bytes, DEFAULT_COPY_SAMPLE),
            interval: if p.sample_interval_s > 0.0 {
                p.sample_interval_s
            } else {
                0.01
            },
        }
    }
}

/// The noise floor of a byte figure's change: `a` and `b` sampled with means `ma` and `mb`.
fn bytes_noise(a: u64, b: u64, ma: f64, mb: f64) -> u64 {
    let sigma = (a as f64 * ma + b as f64 * mb).sqrt();
    let margin = BYTES_MARGIN * a.max(b) as f64;
    (SIGMAS * sigma).max(margin).max(4.0 * ma.max(mb)) as u64
}

/// The noise floor of a time's change.
fn time_noise(a: f64, b: f64, ta: f64, tb: f64) -> f64 {
    let sigma = (a * ta + b * tb).sqrt();
    (SIGMAS * sigma)
        .max(TIME_MARGIN * a.max(b))
        .max(2.0 * ta.max(tb))
}

fn delta(a: u64, b: u64) -> i64 {
    b as i64 - a as i64
}

/// Compare `new` against `base` (their paths as given, for the document).
pub fn compare(base: &Profile, base_path: &str, new: &Profile, new_path: &str) -> Diff {
    let (sb, sn) = (Sampling::of(base), Sampling::of(new));
    let (mut lines, unchanged_lines) = changed(match_lines(base, new), sb, sn);
    let (mut functions, unchanged_functions) = changed(match_functions(base, new), sb, sn);
    order(&mut lines);
    order(&mut functions);
    Diff {
        schema: SCHEMA.to_string(),
        base: run(base, base_path, sb),
        new: run(new, new_path, sn),
        memory: totals(base, new),
        lines,
        functions,
        unchanged_lines,
        unchanged_functions,
    }
}

fn run(p: &Profile, path: &str, s: Sampling) -> Run {
    Run {
        path: path.to_string(),
        command: p.command.clone(),
        exit_code: p.exit.code,
        exit_signal: p.exit.signal,
        wall_s: p.wall_s,
        memory_sample_bytes: s.memory as u64,
        sample_interval_s: s.interval,
    }
}

fn totals(base: &Profile, new: &Profile) -> Totals {
    let exact = |a: u64, b: u64| {
        let d = b as f64 - a as f64;
        Change {
            base: a as f64,
            new: b as f64,
            delta: d,
            meaningful: d.abs() > ARENAS_FLOOR as f64 && d.abs() > BYTES_MARGIN * a.max(b) as f64,
        }
    };
    let rough = |a: f64, b: f64, floor: f64, margin: f64| Change {
        base: a,
        new: b,
        delta: b - a,
        meaningful: (b - a).abs() > floor && (b - a).abs() > margin * a.max(b),
    };
    let alloc = |p: &Profile| p.processes.iter().map(|p| p.alloc_bytes).sum::<u64>();
    Totals {
        peak_heap_bytes: exact(base.memory.peak_heap_bytes, new.memory.peak_heap_bytes),
        peak_rss_bytes: rough(
            base.memory.peak_rss_bytes as f64,
            new.memory.peak_rss_bytes as f64,
            (4u64 << 20) as f64,
            0.05,
        ),
        peak_mapped_bytes: exact(base.memory.peak_mapped_bytes, new.memory.peak_mapped_bytes),
        alloc_bytes: exact(alloc(base), alloc(new)),
        peak_gpu_memory_bytes: rough(
            base.gpu.peak_memory_bytes as f64,
            new.gpu.peak_memory_bytes as f64,
            GPU_FLOOR as f64,
            0.05,
        ),
        wall_s: rough(base.wall_s, new.wall_s, 0.05, TIME_MARGIN),
    }
}

/// A matched pair: where it is, and its measures in each run.
struct Pair<'a> {
    file: String,
    line: u32,
    base_line: Option<u32>,
    function: String,
    source: String,
    status: LineStatus,
    base: Option<&'a Measures>,
    new: Option<&'a Measures>,
}

/// The last two components of a path: the same file in two checkouts.
fn file_key(file: &str) -> &str {
    match file.rmatch_indices('/').nth(1) {
        Some((i, _)) => &file[i + 1..],
        None => file,
    }
}

/// Lines of both runs paired (real lines only: line 0 holds interpreter start-up and code
/// outside any profiled line).
fn match_lines<'a>(base: &'a Profile, new: &'a Profile) -> Vec<Pair<'a>> {
    fn key(l: &LineStats) -> (String, String, String) {
        let text = l.source.trim();
        let text = if text.is_empty() {
            format!("#{}", l.line)
        } else {
            text.to_string()
        };
        (file_key(&l.file).to_string(), l.function.clone(), text)
    }
    let sorted = |p: &'a Profile| {
        let mut v: Vec<&'a LineStats> = p.lines.iter().filter(|l| l.line > 0).collect();
        v.sort_by(|a, b| a.file.cmp(&b.file).then(a.line.cmp(&b.line)));
        v
    };
    let (b, n) = (sorted(base), sorted(new));
    // The n-th line with a key in the base run, by key.
    let mut by_key: HashMap<(String, String, String), Vec<usize>> = HashMap::new();
    for (i, l) in b.iter().enumerate() {
        by_key.entry(key(l)).or_default().push(i);
    }
    let mut taken = vec![false; b.len()];
    let mut seen: HashMap<(String, String, String), usize> = HashMap::new();
    let mut pairs = Vec::new();
    let mut unmatched_new = Vec::new();
    for l in &n {
        let k = key(l);
        let nth = seen.entry(k.clone()).or_insert(0);
        let found = by_key.get(&k).and_then(|v| v.get(*nth)).copied();
        *nth += 1;
        match found {
            Some(i) => {
                taken[i] = true;
                pairs.push(pair(l, Some(b[i]), LineStatus::Changed));
            }
            None => unmatched_new.push(*l),
        }
    }
    // Edited in place: same file, number and function, other text.
    let mut left: HashMap<(String, u32, String), usize> = HashMap::new();
    for (i, l) in b.iter().enumerate().filter(|(i, _)| !taken[*i]) {
        left.insert(
            (file_key(&l.file).to_string(), l.line, l.function.clone()),
            i,
        );
    }
    for l in unmatched_new {
        let k = (file_key(&l.file).to_string(), l.line, l.function.clone());
        match left.remove(&k) {
            Some(i) => {
                taken[i] = true;
                pairs.push(pair(l, Some(b[i]), LineStatus::Edited));
            }
            None => pairs.push(pair(l, None, LineStatus::New)),
        }
    }
    for (i, l) in b.iter().enumerate().filter(|(i, _)| !taken[*i]) {
        let _ = i;
        pairs.push(Pair {
            file: l.file.clone(),
            line: l.line,
            base_line: Some(l.line),
            function: l.function.clone(),
            source: l.source.clone(),
            status: LineStatus::Gone,
            base: Some(&l.measures),
            new: None,
        });
    }
    pairs
}

fn pair<'a>(l: &'a LineStats, base: Option<&'a LineStats>, status: LineStatus) -> Pair<'a> {
    Pair {
        file: l.file.clone(),
        line: l.line,
        base_line: base.map(|b| b.line),
        function: l.function.clone(),
        source: l.source.clone(),
        status,
        base: base.map(|b| &b.measures),
        new: Some(&l.measures),
    }
}

/// Functions of both runs paired by file and name (real functions only, as lines).
fn match_functions<'a>(base: &'a Profile, new: &'a Profile) -> Vec<Pair<'a>> {
    let key = |f: &FunctionStats| (file_key(&f.file).to_string(), f.function.clone());
    let mut old: HashMap<(String, String), &'a FunctionStats> = base
        .functions
        .iter()
        .filter(|f| f.line > 0)
        .map(|f| (key(f), f))
        .collect();
    let mut pairs = Vec::new();
    for f in new.functions.iter().filter(|f| f.line > 0) {
        let b = old.remove(&key(f));
        pairs.push(Pair {
            file: f.file.clone(),
            line: f.line,
            base_line: b.map(|b| b.line),
            function: f.function.clone(),
            source: String::new(),
            status: if b.is_some() {
                LineStatus::Changed
            } else {
                LineStatus::New
            },
            base: b.map(|b| &b.measures),
            new: Some(&f.measures),
        });
    }
    let mut gone: Vec<&FunctionStats> = old.into_values().collect();
    gone.sort_by(|a, b| a.file.cmp(&b.file).then(a.line.cmp(&b.line)));
    for f in gone {
        pairs.push(Pair {
            file: f.file.clone(),
            line: f.line,
            base_line: Some(f.line),
            function: f.function.clone(),
            source: String::new(),
            status: LineStatus::Gone,
            base: Some(&f.measures),
            new: None,
        });
    }
    pairs
}

/// The pairs with a meaningful change, and how many had none.
fn changed(pairs: Vec<Pair<'_>>, sb: Sampling, sn: Sampling) -> (Vec<LineDiff>, usize) {
    let zero = Measures::default();
    let mut out = Vec::new();
    let mut unchanged = 0;
    for p in pairs {
        let (b, n) = (
            Figures::of(p.base.unwrap_or(&zero)),
            Figures::of(p.new.unwrap_or(&zero)),
        );
        let noise = Noise {
            peak_bytes: bytes_noise(b.peak_bytes, n.peak_bytes, sb.memory, sn.memory),
            alloc_bytes: bytes_noise(b.alloc_bytes, n.alloc_bytes, sb.memory, sn.memory),
            copy_bytes: bytes_noise(b.copy_bytes, n.copy_bytes, sb.copy, sn.copy),
            mapped_peak_bytes: bytes_noise(
                b.mapped_peak_bytes,
                n.mapped_peak_bytes,
                sb.memory,
                sn.memory,
            ),
            cpu_s: time_noise(b.cpu_s, n.cpu_s, sb.interval, sn.interval),
            gpu_kernel_s: GPU_TIME_FLOOR_S.max(GPU_TIME_SHARE * b.gpu_kernel_s.max(n.gpu_kernel_s)),
        };
        let gpu_noise =
            GPU_FLOOR.max((0.05 * b.gpu_memory_bytes.max(n.gpu_memory_bytes) as f64) as u64);
        let d = LineDiff {
            peak_bytes_delta: delta(b.peak_bytes, n.peak_bytes),
            alloc_bytes_delta: delta(b.alloc_bytes, n.alloc_bytes),
            copy_bytes_delta: delta(b.copy_bytes, n.copy_bytes),
            mapped_peak_bytes_delta: delta(b.mapped_peak_bytes, n.mapped_peak_bytes),
            cpu_s_delta: n.cpu_s - b.cpu_s,
            cpu_python_s_delta: n.cpu_python_s - b.cpu_python_s,
            cpu_native_s_delta: n.cpu_native_s - b.cpu_native_s,
            waiting_s_delta: n.waiting_s - b.waiting_s,
            gpu_memory_bytes_delta: delta(b.gpu_memory_bytes, n.gpu_memory_bytes),
            gpu_peak_bytes_delta: delta(b.gpu_peak_bytes, n.gpu_peak_bytes),
            gpu_copy_bytes_delta: delta(b.gpu_copy_bytes, n.gpu_copy_bytes),
            gpu_kernel_s_delta: n.gpu_kernel_s - b.gpu_kernel_s,
            gpu_tensor_peak_bytes_delta: delta(b.gpu_tensor_peak_bytes, n.gpu_tensor_peak_bytes),
            file: p.file,
            line: p.line,
            base_line: p.base_line,
            function: p.function,
            source: p.source,
            status: p.status,
            meaningful: Vec::new(),
            noise,
            base: b,
            new: n,
        };
        let mut meaningful = Vec::new();
        let over = |delta: i64, floor: u64| delta.unsigned_abs() > floor;
        if over(d.peak_bytes_delta, d.noise.peak_bytes) {
            meaningful.push("peak_bytes");
        }
        if over(d.alloc_bytes_delta, d.noise.alloc_bytes) {
            meaningful.push("alloc_bytes");
        }
        if over(d.copy_bytes_delta, d.noise.copy_bytes) {
            meaningful.push("copy_bytes");
        }
        if over(d.mapped_peak_bytes_delta, d.noise.mapped_peak_bytes) {
            meaningful.push("mapped_peak_bytes");
        }
        if d.cpu_s_delta.abs() > d.noise.cpu_s {
            meaningful.push("cpu_s");
        }
        if over(d.gpu_memory_bytes_delta, gpu_noise) {
            meaningful.push("gpu_memory_bytes");
        }
        // Exact figures (every CUDA call is recorded): any change is one.
        if d.gpu_peak_bytes_delta != 0 {
            meaningful.push("gpu_peak_bytes");
        }
        if d.gpu_copy_bytes_delta != 0 {
            meaningful.push("gpu_copy_bytes");
        }
        if d.gpu_kernel_s_delta.abs() > d.noise.gpu_kernel_s {
            meaningful.push("gpu_kernel_s");
        }
        if d.gpu_tensor_peak_bytes_delta != 0 {
            meaningful.push("gpu_tensor_peak_bytes");
        }
        if meaningful.is_empty() {
            unchanged += 1;
            continue;
        }
        out.push(LineDiff {
            meaningful: meaningful.into_iter().map(str::to_string).collect(),
            ..d
        });
    }
    (out, unchanged)
}

impl LineDiff {
    /// Whether the named delta is beyond noise.
    pub fn is_meaningful(&self, figure: &str) -> bool {
        self.meaningful.iter().any(|m| m == figure)
    }

    /// The sort key: each meaningful delta's size, peak bytes first.
    fn weight(&self) -> [f64; 8] {
        let w = |figure: &str, v: f64| {
            if self.is_meaningful(figure) {
                v.abs()
            } else {
                0.0
            }
        };
        [
            w("peak_bytes", self.peak_bytes_delta as f64),
            w("gpu_peak_bytes", self.gpu_peak_bytes_delta as f64),
            w(
                "gpu_tensor_peak_bytes",
                self.gpu_tensor_peak_bytes_delta as f64,
            ),
            w("alloc_bytes", self.alloc_bytes_delta as f64),
            w("copy_bytes", self.copy_bytes_delta as f64),
            w("gpu_copy_bytes", self.gpu_copy_bytes_delta as f64),
            w("gpu_kernel_s", self.gpu_kernel_s_delta),
            w("cpu_s", self.cpu_s_delta),
        ]
    }
}

fn order(v: &mut [LineDiff]) {
    v.sort_by(|a, b| {
        let (wa, wb) = (a.weight(), b.weight());
        wb.iter()
            .zip(wa.iter())
            .map(|(x, y)| x.total_cmp(y))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.file.cmp(&b.file))
            .then(a.line.cmp(&b.line))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(file: &str, n: u32, function: &str, source: &str, peak: u64, cpu: f64) -> LineStats {
        LineStats {
            file: file.into(),
            line: n,
            function: function.into(),
            source: source.into(),
            measures: Measures {
                peak_bytes: peak,
                alloc_bytes: peak,
                cpu_python_s: cpu,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn profile(lines: Vec<LineStats>) -> Profile {
        Profile {
            lines,
            sample_interval_s: 0.01,
            memory_sample_bytes: 128 << 10,
            ..Default::default()
        }
    }

    #[test]
    fn lines_are_matched_by_their_text_when_code_above_moves_them() {
        let base = profile(vec![
            line("/a/x/t.py", 10, "f", "a = big()", 100 << 20, 1.0),
            line("/a/x/t.py", 11, "f", "b = small()", 1 << 20, 0.1),
        ]);
        let new = profile(vec![
            line("/b/x/t.py", 14, "f", "a = big()", 300 << 20, 1.0),
            line("/b/x/t.py", 15, "f", "b = small()", 1 << 20, 0.1),
        ]);
        let d = compare(&base, "base.json", &new, "new.json");
        assert_eq!(d.lines.len(), 1, "{:?}", d.lines);
        let l = &d.lines[0];
        assert_eq!(
            (l.line, l.base_line, l.status.as_str()),
            (14, Some(10), "changed")
        );
        assert_eq!(l.peak_bytes_delta, 200 << 20);
        assert_eq!(d.unchanged_lines, 1);
    }

    #[test]
    fn repeated_text_pairs_in_order_and_an_edited_line_stays_itself() {
        let base = profile(vec![
            line("t.py", 3, "f", "x = g()", 10 << 20, 0.0),
            line("t.py", 4, "f", "x = g()", 20 << 20, 0.0),
            line("t.py", 5, "f", "y = h(1)", 10 << 20, 0.0),
        ]);
        let new = profile(vec![
            line("t.py", 3, "f", "x = g()", 10 << 20, 0.0),
            line("t.py", 4, "f", "x = g()", 60 << 20, 0.0),
            line("t.py", 5, "f", "y = h(2)", 30 << 20, 0.0),
            line("t.py", 9, "f", "z = k()", 50 << 20, 0.0),
        ]);
        let d = compare(&base, "", &new, "");
        let got: Vec<(u32, &str, i64)> = d
            .lines
            .iter()
            .map(|l| (l.line, l.status.as_str(), l.peak_bytes_delta >> 20))
            .collect();
        assert_eq!(
            got,
            vec![(9, "new", 50), (4, "changed", 40), (5, "edited", 20)]
        );
    }

    #[test]
    fn sampling_noise_is_not_change() {
        // 40 MiB of small objects sampled at 128 KiB: about 320 samples, a standard error of
        // about 2.3 MiB; a 3 MiB difference is noise, 30 MiB is not.
        let base = profile(vec![line("t.py", 1, "f", "a", 40 << 20, 0.0)]);
        let same = profile(vec![line("t.py", 1, "f", "a", 43 << 20, 0.0)]);
        assert!(compare(&base, "", &same, "").lines.is_empty());
        let more = profile(vec![line("t.py", 1, "f", "a", 70 << 20, 0.0)]);
        assert_eq!(compare(&base, "", &more, "").lines.len(), 1);
        // 2 s of CPU at 10 ms: +-0.14 s of sampling error, and machines vary by 25 %.
        let base = profile(vec![line("t.py", 1, "f", "a", 0, 2.0)]);
        let slower = profile(vec![line("t.py", 1, "f", "a", 0, 2.5)]);
        assert!(compare(&base, "", &slower, "").lines.is_empty());
        let much = profile(vec![line("t.py", 1, "f", "a", 0, 4.0)]);
        let d = compare(&base, "", &much, "");
        assert_eq!(d.lines[0].meaningful, vec!["cpu_s".to_string()]);
    }

    #[test]
    fn lines_sort_by_peak_then_allocation_then_copies_then_time() {
        let mut cpu_only = line("t.py", 1, "f", "spin()", 0, 9.0);
        cpu_only.measures.alloc_bytes = 0;
        let base = profile(vec![
            line("t.py", 1, "f", "spin()", 0, 1.0),
            line("t.py", 2, "f", "small()", 0, 0.0),
            line("t.py", 3, "f", "big()", 0, 0.0),
        ]);
        let new = profile(vec![
            cpu_only,
            line("t.py", 2, "f", "small()", 20 << 20, 0.0),
            line("t.py", 3, "f", "big()", 200 << 20, 0.0),
        ]);
        let d = compare(&base, "", &new, "");
        let order: Vec<u32> = d.lines.iter().map(|l| l.line).collect();
        assert_eq!(order, vec![3, 2, 1]);
    }
}
