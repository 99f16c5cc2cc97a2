//! Places (file, line, function) and what accumulates at each: CPU time by kind, native
//! functions, sampled allocations and copies. `cpu` and `memory` add to them; `summarise`
//! turns them into the profile's lines and functions. Pure.

use std::collections::{BTreeMap, HashMap};

use super::filter::Filter;
use super::leaks::Lifetimes;
use super::profile::{FunctionStats, LineStats, Measures, NativeFrame};
use crate::recording::{ChannelSummary, CodeInfo, Recording};
use crate::symbolize::linetable::{LineIndex, LineTableFormat};

/// Pseudo-file for samples of threads without Python (BLAS pools, native threads).
pub const NATIVE_THREAD: &str = "<native thread>";
/// Pseudo-file for the main thread while it has no Python frame (interpreter start-up and
/// shutdown).
pub const INTERPRETER: &str = "<interpreter start-up and shutdown>";
/// Pseudo-file for Python samples with no frame in a profiled file.
pub const OUTSIDE: &str = "<outside profiled code>";
/// Native functions kept per line.
const NATIVE_PER_LINE: usize = 5;
/// Points in each line's footprint timeline.
const FOOTPRINT_POINTS: usize = 20;

/// Where a sample is attributed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// Source file (or pseudo-file).
    pub file: String,
    /// Line number (0 for pseudo-files).
    pub line: u32,
    /// Qualified name of the code object.
    pub function: String,
    /// First line of the code object.
    pub first_line: u32,
}

/// What accumulates at a place.
#[derive(Default)]
pub struct Acc {
    /// CPU nanoseconds interpreting Python.
    pub python_ns: u64,
    /// CPU nanoseconds in native code.
    pub native_ns: u64,
    /// Off-CPU nanoseconds.
    pub waiting_ns: u64,
    /// CPU nanoseconds the kernel spent on page faults.
    pub kernel_ns: u64,
    /// Part of it while the process's worker processes computed.
    pub workers_ns: u64,
    /// Native CPU nanoseconds by (symbol, library).
    pub natives: HashMap<(String, String), u64>,
    /// Part of `native_ns` a thread pool spent spinning or waiting at a barrier.
    pub spin_ns: u64,
    /// Part of `native_ns` in numpy's element-wise copy and cast loops.
    pub copy_loop_ns: u64,
    /// Bytes allocated (sampled estimate).
    pub alloc_bytes: u64,
    /// Part of it through Python's allocator.
    pub alloc_python_bytes: u64,
    /// Bytes allocated here and live at the process's heap peak.
    pub peak_bytes: u64,
    /// Blocks allocated here and live at the heap peak (estimated: each sampled block stands
    /// for `weight / size` blocks).
    pub peak_blocks: f64,
    /// Bytes copied.
    pub copy_bytes: u64,
    /// Bytes mapped here and still mapped at the process's mapped peak.
    pub mapped_peak_bytes: u64,
    /// Sampled blocks (for footprints and leak evidence).
    pub blocks: Lifetimes,
    /// Sampled time here while the process's GPU utilisation was known (ns).
    pub gpu_time_ns: u64,
    /// That time weighted by the utilisation (ns).
    pub gpu_busy_ns: f64,
    /// Share of the process's GPU memory growth while here (bytes).
    pub gpu_memory_bytes: f64,
    /// What the CUDA calls made here did (`gpu_calls`; GPU wait from `cpu`).
    pub gpu_calls: super::profile::GpuLineCalls,
    /// Device nanoseconds and count of the kernels launched here, by name (`gpu_kernels`).
    pub kernels: HashMap<String, (u64, u64)>,
    /// Bytes of tensors allocated here and live at their process's GPU peak (`gpu_tensors`).
    pub gpu_tensor_bytes: u64,
}

impl Acc {
    /// Add everything of `other`.
    pub fn merge(&mut self, other: Acc) {
        self.python_ns += other.python_ns;
        self.native_ns += other.native_ns;
        self.waiting_ns += other.waiting_ns;
        self.kernel_ns += other.kernel_ns;
        for (key, ns) in other.natives {
            *self.natives.entry(key).or_default() += ns;
        }
        self.workers_ns += other.workers_ns;
        self.spin_ns += other.spin_ns;
        self.copy_loop_ns += other.copy_loop_ns;
        self.alloc_bytes += other.alloc_bytes;
        self.alloc_python_bytes += other.alloc_python_bytes;
        self.peak_bytes += other.peak_bytes;
        self.peak_blocks += other.peak_blocks;
        self.copy_bytes += other.copy_bytes;
        self.mapped_peak_bytes += other.mapped_peak_bytes;
        self.blocks.merge(other.blocks);
        self.gpu_time_ns += other.gpu_time_ns;
        self.gpu_busy_ns += other.gpu_busy_ns;
        self.gpu_memory_bytes += other.gpu_memory_bytes;
        self.gpu_calls.add(&other.gpu_calls);
        super::gpu_kernels::merge(&mut self.kernels, other.kernels);
        self.gpu_tensor_bytes = self.gpu_tensor_bytes.saturating_add(other.gpu_tensor_bytes);
    }
}

/// Lines are physical lines: code objects sharing a line (comprehensions before 3.12,
/// lambdas) are merged into one row named after the function with most time there. Functions
/// are code objects.
pub fn summarise(
    places: HashMap<Place, Acc>,
    wall_ns: u64,
) -> (Vec<LineStats>, Vec<FunctionStats>) {
    let mut functions: BTreeMap<(String, String, u32), (FunctionStats, Acc)> = BTreeMap::new();
    let mut rows: BTreeMap<(String, u32), (Acc, String, u64)> = BTreeMap::new();
    for (place, acc) in places {
        let key = (place.file.clone(), place.function.clone(), place.first_line);
        let (f, f_acc) = functions.entry(key).or_insert_with(|| {
            let stats = FunctionStats {
                file: place.file.clone(),
                function: place.function.clone(),
                line: place.first_line,
                measures: Measures::default(),
            };
            (stats, Acc::default())
        });
        add(&mut f.measures, &acc);
        for (key, ns) in &acc.natives {
            *f_acc.natives.entry(key.clone()).or_default() += ns;
        }
        super::gpu_kernels::merge(&mut f_acc.kernels, acc.kernels.clone());
        f_acc.gpu_time_ns += acc.gpu_time_ns;
        f_acc.gpu_busy_ns += acc.gpu_busy_ns;
        let total = acc.python_ns + acc.native_ns + acc.kernel_ns + acc.waiting_ns;
        let row = rows
            .entry((place.file, place.line))
            .or_insert_with(|| (Acc::default(), String::new(), 0));
        if total > row.2 || row.1.is_empty() {
            (row.1, row.2) = (place.function, total);
        }
        row.0.merge(acc);
    }
    let lines = rows
        .into_iter()
        .map(|((file, line), (acc, function, _))| {
            let mut measures = Measures::default();
            add(&mut measures, &acc);
            measures.leak = super::leaks::evidence(&acc.blocks);
            let footprint_bytes = super::leaks::footprint(&acc.blocks, wall_ns, FOOTPRINT_POINTS);
            measures.gpu_util_pct = gpu_util_pct(&acc);
            measures.native = natives_of(acc.natives);
            measures.gpu_kernel_names = super::gpu_kernels::top(acc.kernels);
            LineStats {
                file,
                line,
                function,
                measures,
                footprint_bytes,
                ..LineStats::default()
            }
        })
        .collect();
    let functions = functions
        .into_values()
        .map(|(mut f, acc)| {
            f.measures.gpu_util_pct = gpu_util_pct(&acc);
            f.measures.native = natives_of(acc.natives);
            f.measures.gpu_kernel_names = super::gpu_kernels::top(acc.kernels);
            f
        })
        .collect();
    (lines, functions)
}

fn add(m: &mut Measures, acc: &Acc) {
    m.cpu_python_s += acc.python_ns as f64 / 1e9;
    m.cpu_native_s += acc.native_ns as f64 / 1e9;
    m.waiting_s += acc.waiting_ns as f64 / 1e9;
    m.kernel_s += acc.kernel_ns as f64 / 1e9;
    m.waiting_for_workers_s += acc.workers_ns as f64 / 1e9;
    m.cpu_spin_s += acc.spin_ns as f64 / 1e9;
    m.copy_loop_s += acc.copy_loop_ns as f64 / 1e9;
    m.alloc_bytes += acc.alloc_bytes;
    m.alloc_python_bytes += acc.alloc_python_bytes;
    m.peak_bytes += acc.peak_bytes;
    m.peak_blocks += acc.peak_blocks.round() as u64;
    m.copy_bytes += acc.copy_bytes;
    m.mapped_peak_bytes += acc.mapped_peak_bytes;
    m.gpu_memory_bytes += acc.gpu_memory_bytes.round() as u64;
    m.gpu_calls.add(&acc.gpu_calls);
    m.gpu_tensor_peak_bytes = m.gpu_tensor_peak_bytes.saturating_add(acc.gpu_tensor_bytes);
}

/// "GPU busy while this line ran": the utilisation averaged over the line's sampled time.
fn gpu_util_pct(acc: &Acc) -> f64 {
    if acc.gpu_time_ns == 0 {
        0.0
    } else {
        100.0 * acc.gpu_busy_ns / acc.gpu_time_ns as f64
    }
}

/// The top native functions of a line, most time first.
fn natives_of(natives: HashMap<(String, String), u64>) -> Vec<NativeFrame> {
    let mut out: Vec<NativeFrame> = natives
        .into_iter()
        .map(|((symbol, library), ns)| NativeFrame {
            symbol,
            library,
            cpu_s: ns as f64 / 1e9,
        })
        .collect();
    out.sort_by(|a, b| {
        b.cpu_s
            .total_cmp(&a.cpu_s)
            .then_with(|| a.symbol.cmp(&b.symbol))
    });
    out.truncate(NATIVE_PER_LINE);
    out
}

/// Where an event with these frames (innermost first), on thread `tid` of process `pid`, goes:
/// the innermost frame in a profiled file that is not [`generated`] code passed on, else a
/// pseudo-file.
pub fn place_of(
    frames: &[(u32, i32)],
    tid: u32,
    pid: u32,
    lines: &mut Lines<'_>,
    filter: &Filter,
) -> Place {
    for (i, &(code, lasti)) in frames.iter().enumerate() {
        let Some((info, line)) = lines.line(code, lasti) else {
            continue;
        };
        if !filter.profiles(&info.filename) {
            continue;
        }
        if info.filename == "<string>" && lines.runs_a_bootstrap() {
            continue; // multiprocessing's `-c` in a worker it started: not the program's line
        }
        if is_generated(&info.filename)
            && passed_on(info, frames.get(i + 1..).unwrap_or(&[]), lines, filter)
        {
            continue;
        }
        return Place {
            file: info.filename.clone(),
            line,
            function: info.qualname.clone(),
            first_line: info.firstlineno.max(0) as u32,
        };
    }
    let pseudo = match (frames.is_empty(), tid == pid) {
        (false, _) => OUTSIDE,
        (true, true) => INTERPRETER,
        (true, false) => NATIVE_THREAD,
    };
    Place {
        file: pseudo.to_string(),
        line: 0,
        function: pseudo.to_string(),
        first_line: 0,
    }
}

/// Code compiled from a string rather than read from a file: `exec`/`compile`'s `<string>`,
/// dataclasses' and namedtuple's generated methods, `.pth` lines, torch.fx's
/// `<eval_with_key>.N`, a notebook's `<ipython-input-…>` (frozen modules are libraries).
fn is_generated(file: &str) -> bool {
    file.starts_with('<') && !file.starts_with("<frozen ")
}

/// Whether generated code (`file`, called by `older`, innermost first) is charged to the line
/// that caused it rather than listed as a file of its own: when user code in a real file ran
/// it (a dataclass's `__init__`, an `exec` in a library the user called), or when it is
/// `<string>` run straight from a library (`site.py`'s `.pth` lines). Code run as the program
/// itself (`python -c`, a notebook cell under the kernel's library frames) stays where it is.
/// Generated code with nothing known older (a stack read only in part) is the program's own
/// only in a process running code given as a string (`-c`, standard input).
fn passed_on(
    generated: &CodeInfo,
    older: &[(u32, i32)],
    lines: &mut Lines<'_>,
    filter: &Filter,
) -> bool {
    let file = generated.filename.as_str();
    let mut caller = true;
    let mut seen = false;
    for &(code, lasti) in older {
        let Some((info, _)) = lines.line(code, lasti) else {
            continue;
        };
        if is_generated(&info.filename) {
            continue; // generated code run by generated code: look at what ran that
        }
        seen = true;
        let profiled = filter.profiles(&info.filename);
        if profiled {
            return true;
        }
        if caller && file == "<string>" {
            return true;
        }
        caller = false;
    }
    !seen && !lines.runs_a_string()
}

/// Line lookup for the code ids of one channel (falling back to the channel's fork parents,
/// whose code ids a fork child inherits), with decoded line tables cached.
pub struct Lines<'r> {
    chain: Vec<&'r ChannelSummary>,
    format: Option<LineTableFormat>,
    cache: HashMap<u32, Option<(&'r CodeInfo, LineIndex)>>,
}

impl<'r> Lines<'r> {
    /// Lines of channel `ci`.
    pub fn new(rec: &'r Recording, ci: usize) -> Lines<'r> {
        let mut chain = vec![&rec.channels[ci]];
        while let Some(child) = chain.last().filter(|c| c.forked) {
            let parent = rec
                .channels
                .iter()
                .filter(|p| p.pid == child.ppid && p.start_ns <= child.start_ns)
                .max_by_key(|p| p.start_ns);
            match parent {
                Some(p) if chain.len() < 64 => chain.push(p),
                _ => break,
            }
        }
        let format = rec.channels[ci]
            .python
            .as_deref()
            .and_then(parse_minor)
            .and_then(|(ma, mi)| LineTableFormat::for_version(ma, mi));
        Lines {
            chain,
            format,
            cache: HashMap::new(),
        }
    }

    /// Whether the process runs code given as a string rather than a script file: `python -c`,
    /// or a program read from standard input.
    pub fn runs_a_string(&self) -> bool {
        let Some(args) = self.chain.first().map(|c| &c.command) else {
            return false;
        };
        args.len() <= 1 || args.iter().skip(1).any(|a| a == "-c" || a == "-")
    }

    /// Whether the process is a worker a library started with a `-c` of its own:
    /// multiprocessing's spawn and forkserver start-up (DataLoader, dask, `Pool`, joblib's
    /// multiprocessing backend use it) and its resource tracker. Their `<string>` is the
    /// library's code, not the program's.
    pub fn runs_a_bootstrap(&self) -> bool {
        const BOOTSTRAPS: [&str; 4] = [
            "from multiprocessing.spawn import",
            "from multiprocessing.forkserver import",
            "from multiprocessing.resource_tracker import",
            "from multiprocessing.semaphore_tracker import",
        ];
        let Some(args) = self.chain.first().map(|c| &c.command) else {
            return false;
        };
        let code = args
            .iter()
            .position(|a| a == "-c")
            .and_then(|i| args.get(i + 1));
        code.is_some_and(|c| BOOTSTRAPS.iter().any(|b| c.trim_start().starts_with(b)))
    }

    /// The code object and line of `(code, lasti)`.
    pub fn line(&mut self, code: u32, lasti: i32) -> Option<(&'r CodeInfo, u32)> {
        let format = self.format?;
        let chain = &self.chain;
        let entry = self.cache.entry(code).or_insert_with(|| {
            let info = chain.iter().find_map(|c| c.codes.get(&code))?;
            Some((
                info,
                LineIndex::new(format, &info.linetable, info.firstlineno),
            ))
        });
        let (info, index) = entry.as_ref()?;
        // Line 0 is what CPython 3.11+ gives the RESUME that opens a module's code: report
        // the code object's first line rather than a line that does not exist.
        let line = index
            .line(lasti)
            .filter(|&l| l > 0)
            .unwrap_or(info.firstlineno.max(1) as u32);
        Some((info, line))
    }
}

fn parse_minor(version: &str) -> Option<(u8, u8)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}
