//! CPU samples → per-line and per-function time. Each sample goes to the innermost frame in a
//! profiled file (the user's code by default), and is Python time or native time by where the
//! interrupted instruction was. Pure: native names are resolved beforehand.

use std::collections::{BTreeMap, HashMap};

use mlprof_wire::sample_flags;

use super::filter::Filter;
use super::profile::{FunctionStats, LineStats, Measures, NativeFrame, ThreadStats};
use crate::collect::{ChannelSummary, CodeInfo, CpuSample, Recording};
use crate::symbolize::linetable::{LineIndex, LineTableFormat};
use crate::symbolize::native::{CodeClass, Resolved};

/// Native names of sampled instruction pointers, by (channel index, ip).
pub type NativeNames = HashMap<(usize, u64), Resolved>;

/// Pseudo-file for samples of threads without Python (BLAS pools, native threads).
pub const NATIVE_THREAD: &str = "<native thread>";
/// Pseudo-file for the main thread while it has no Python frame (interpreter start-up and
/// shutdown).
pub const INTERPRETER: &str = "<interpreter start-up and shutdown>";
/// Pseudo-file for Python samples with no frame in a profiled file.
pub const OUTSIDE: &str = "<outside profiled code>";
/// Native functions kept per line.
const NATIVE_PER_LINE: usize = 5;

/// Where a sample is attributed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Place {
    file: String,
    line: u32,
    function: String,
    first_line: u32,
}

#[derive(Default)]
struct Acc {
    python_ns: u64,
    native_ns: u64,
    system_ns: u64,
    natives: HashMap<(String, String), u64>,
}

/// Per-line and per-function CPU measures of the whole recording.
pub fn attribute(rec: &Recording, natives: &NativeNames, filter: &Filter) -> CpuView {
    let mut places: HashMap<Place, Acc> = HashMap::new();
    let mut threads: BTreeMap<(u32, u32), ThreadStats> = BTreeMap::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        let mut lines = Lines::new(rec, ci);
        let mut placed: Vec<Place> = channel
            .samples
            .iter()
            .map(|s| place_of(s, channel.pid, &mut lines, filter))
            .collect();
        attribute_native_threads(&channel.samples, &mut placed);
        for (sample, place) in channel.samples.iter().zip(placed) {
            let kind = classify(sample, natives.get(&(ci, sample.ip)));
            let thread = threads
                .entry((channel.pid, sample.tid))
                .or_insert_with(|| ThreadStats {
                    pid: channel.pid,
                    tid: sample.tid,
                    ..ThreadStats::default()
                });
            thread.python |= !sample.frames.is_empty();
            let acc = places.entry(place).or_default();
            match kind {
                Time::Waiting => {
                    acc.system_ns += sample.weight_ns;
                    thread.cpu_system_s += sample.weight_ns as f64 / 1e9;
                }
                Time::Python => {
                    acc.python_ns += sample.weight_ns;
                    thread.cpu_python_s += sample.weight_ns as f64 / 1e9;
                }
                Time::Native(symbol, library) => {
                    acc.native_ns += sample.weight_ns;
                    thread.cpu_native_s += sample.weight_ns as f64 / 1e9;
                    *acc.natives.entry((symbol, library)).or_default() += sample.weight_ns;
                }
            }
        }
    }
    let (lines, functions) = summarise(places);
    CpuView {
        lines,
        functions,
        threads: threads.into_values().collect(),
    }
}

/// Lines, functions and threads of the CPU view.
pub struct CpuView {
    /// Per physical line.
    pub lines: Vec<LineStats>,
    /// Per function (code object).
    pub functions: Vec<FunctionStats>,
    /// Per thread.
    pub threads: Vec<ThreadStats>,
}

/// What kind of time a sample is.
enum Time {
    Waiting,
    Python,
    Native(String, String),
}

fn classify(sample: &CpuSample, named: Option<&Resolved>) -> Time {
    if sample.flags & sample_flags::WAITING != 0 {
        return Time::Waiting;
    }
    match named {
        Some(r) if r.class == CodeClass::Interpreter => Time::Python,
        Some(r) => Time::Native(
            r.symbol
                .clone()
                .unwrap_or_else(|| format!("{:#x}", sample.ip)),
            r.library.clone(),
        ),
        None => Time::Native("?".to_string(), "?".to_string()),
    }
}

/// How far apart a native-thread sample and Python-thread samples may be to be joined.
const JOIN_WINDOW_NS: u64 = 25_000_000;

/// Samples of threads without Python (BLAS and OpenMP pools) go to the line the process's
/// Python threads were on at that moment, when all of their samples within
/// [`JOIN_WINDOW_NS`] agree on one line: that line is waiting for the pool. Otherwise they
/// stay on [`NATIVE_THREAD`].
fn attribute_native_threads(samples: &[CpuSample], placed: &mut [Place]) {
    let mut python: Vec<(u64, usize)> = samples
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.frames.is_empty())
        .map(|(i, s)| (s.t_ns, i))
        .collect();
    python.sort_unstable();
    for i in 0..samples.len() {
        if placed[i].file != NATIVE_THREAD {
            continue;
        }
        let t = samples[i].t_ns;
        let from = python.partition_point(|&(pt, _)| pt + JOIN_WINDOW_NS < t);
        let near = python[from..]
            .iter()
            .take_while(|&&(pt, _)| pt <= t + JOIN_WINDOW_NS);
        let mut unique: Option<&Place> = None;
        let mut agreed = true;
        for &(_, j) in near {
            match unique {
                None => unique = Some(&placed[j]),
                Some(p) if *p == placed[j] => {}
                Some(_) => agreed = false,
            }
        }
        if let (Some(p), true) = (unique, agreed) {
            placed[i] = p.clone();
        }
    }
}

/// Lines are physical lines: code objects sharing a line (comprehensions before 3.12,
/// lambdas) are merged into one row named after the function with most time there. Functions
/// are code objects.
fn summarise(places: HashMap<Place, Acc>) -> (Vec<LineStats>, Vec<FunctionStats>) {
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
        let total = acc.python_ns + acc.native_ns + acc.system_ns;
        let row = rows
            .entry((place.file, place.line))
            .or_insert_with(|| (Acc::default(), String::new(), 0));
        if total > row.2 || row.1.is_empty() {
            (row.1, row.2) = (place.function, total);
        }
        row.0.python_ns += acc.python_ns;
        row.0.native_ns += acc.native_ns;
        row.0.system_ns += acc.system_ns;
        for (key, ns) in acc.natives {
            *row.0.natives.entry(key).or_default() += ns;
        }
    }
    let lines = rows
        .into_iter()
        .map(|((file, line), (acc, function, _))| {
            let mut measures = Measures::default();
            add(&mut measures, &acc);
            measures.native = natives_of(acc.natives);
            LineStats {
                file,
                line,
                function,
                measures,
                ..LineStats::default()
            }
        })
        .collect();
    let functions = functions
        .into_values()
        .map(|(mut f, acc)| {
            f.measures.native = natives_of(acc.natives);
            f
        })
        .collect();
    (lines, functions)
}

fn add(m: &mut Measures, acc: &Acc) {
    m.cpu_python_s += acc.python_ns as f64 / 1e9;
    m.cpu_native_s += acc.native_ns as f64 / 1e9;
    m.cpu_system_s += acc.system_ns as f64 / 1e9;
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

fn place_of(sample: &CpuSample, pid: u32, lines: &mut Lines<'_>, filter: &Filter) -> Place {
    for &(code, lasti) in &sample.frames {
        let Some((info, line)) = lines.line(code, lasti) else {
            continue;
        };
        let place = Place {
            file: info.filename.clone(),
            line,
            function: info.qualname.clone(),
            first_line: info.firstlineno.max(0) as u32,
        };
        if filter.profiles(&info.filename) {
            return place;
        }
    }
    let pseudo = match (sample.frames.is_empty(), sample.tid == pid) {
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

/// Line lookup for the code ids of one channel (falling back to the channel's fork parents,
/// whose code ids a fork child inherits), with decoded line tables cached.
struct Lines<'r> {
    chain: Vec<&'r ChannelSummary>,
    format: Option<LineTableFormat>,
    cache: HashMap<u32, Option<(&'r CodeInfo, LineIndex)>>,
}

impl<'r> Lines<'r> {
    fn new(rec: &'r Recording, ci: usize) -> Lines<'r> {
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

    fn line(&mut self, code: u32, lasti: i32) -> Option<(&'r CodeInfo, u32)> {
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
        let line = index.line(lasti).unwrap_or(info.firstlineno.max(0) as u32);
        Some((info, line))
    }
}

fn parse_minor(version: &str) -> Option<(u8, u8)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}
