//! Hints: short suggestions drawn from a profile by fixed rules (no network, no model), each
//! naming its line (or process), the figure that triggered it and the saving to expect. Run
//! on a finished profile (sources attached, since one rule reads the line's text). Pure.
//!
//! The rules and their thresholds are in `docs/design/hints.md`; each has a workload that
//! triggers it and one that must not in `tests/e2e/hints.rs`.

use crate::model::{Hint, HintKind, LineStats, Profile};
use crate::units::{bytes, seconds};

const MIB: u64 = 1 << 20;
/// Hints a profile carries at most.
const MAX_HINTS: usize = 10;

/// A hint about line `l`, its place filled in.
pub(super) fn at(kind: HintKind, l: &LineStats) -> Hint {
    Hint {
        kind,
        file: Some(l.file.clone()),
        line: Some(l.line),
        function: Some(l.function.clone()),
        source: Some(l.source.trim().to_string()),
        ..Default::default()
    }
}

/// Every hint the profile supports, largest saving first.
pub fn of(p: &Profile) -> Vec<Hint> {
    let mut out = Vec::new();
    let real: Vec<&LineStats> = p.lines.iter().filter(|l| l.line > 0).collect();
    let whole_s = super::gpu_hints::whole_s(p);
    for l in &real {
        out.extend(super::gpu_hints::of(l, whole_s));
        out.extend(copies(l));
        out.extend(float64(p, l));
        out.extend(growing(l));
        out.extend(python_objects(p, l));
        out.extend(onnx_arena(l));
        out.extend(super::native_hints::element_copies(l, whole_s));
    }
    out.extend(threads(p));
    out.extend(super::native_hints::spin(p, &real, whole_s));
    out.extend(fork_inherits(p));
    out.extend(super::tensor_hints::of(p));
    out.sort_by(|a, b| {
        b.saving_bytes
            .unwrap_or(0)
            .cmp(&a.saving_bytes.unwrap_or(0))
            .then(
                b.saving_s
                    .unwrap_or(0.0)
                    .total_cmp(&a.saving_s.unwrap_or(0.0)),
            )
    });
    out.truncate(MAX_HINTS);
    out
}

/// Copies below this volume are not worth a hint.
const COPY_MIN: u64 = 64 * MIB;

/// An import statement: what it holds is the module's, not data the user made.
fn is_import(source: &str) -> bool {
    let text = code(source).trim_start();
    text.starts_with("import ") || (text.starts_with("from ") && text.contains(" import "))
}

/// Libraries whose copies the copy advice is about: numpy's own modules and the C runtime
/// (by file name).
fn numpy_or_runtime(library: &str) -> bool {
    [
        "_multiarray_umath",
        "_umath_linalg",
        "libc.so",
        "libc-",
        "libm.so",
        "libpython",
    ]
    .iter()
    .any(|p| library.starts_with(p))
        || library.starts_with("python")
}

/// A line whose every allocated byte is a copy of existing data. Not when the line's work is
/// a library call that makes its copies inside (polars' sort, a scikit-learn fit): most of
/// its native time in a library other than numpy and the C runtime, where numpy's advice
/// does not reach.
fn copies(l: &LineStats) -> Option<Hint> {
    let m = &l.measures;
    if m.copy_bytes < COPY_MIN || (m.copy_bytes as f64) < 0.9 * m.alloc_bytes as f64 {
        return None;
    }
    let foreign: f64 = m
        .native
        .iter()
        .filter(|n| !numpy_or_runtime(&n.library))
        .map(|n| n.cpu_s)
        .sum();
    // A few samples elsewhere (a BLAS pool spinning on, joined to the line) decide nothing.
    if foreign > 0.5 * m.cpu_native_s && foreign >= 0.1 {
        return None;
    }
    let copy_s: f64 = m
        .native
        .iter()
        .filter(|n| n.symbol.contains("memcpy") || n.symbol.contains("memmove"))
        .map(|n| n.cpu_s)
        .sum();
    let mut h = at(HintKind::Copies, l);
    h.evidence = format!(
        "copies {} and allocates {}: what it allocates is filled by copying",
        bytes(m.copy_bytes),
        bytes(m.alloc_bytes)
    );
    h.suggestion = "work in place (`a += b`, `out=`), use `np.asarray` (no copy of an array) \
                    instead of `np.array`, or a view (slicing, `reshape`) instead of a copy"
        .into();
    h.saving_bytes = Some(m.copy_bytes);
    h.saving_s = (copy_s > 0.0).then_some(copy_s);
    h.saving = if copy_s > 0.0 {
        format!(
            "up to {} of copies and {} of copying",
            bytes(m.copy_bytes),
            seconds(copy_s)
        )
    } else {
        format!("up to {} of copies", bytes(m.copy_bytes))
    };
    Some(h)
}

/// A line among the peak's top holders: at least this share of the peak and `floor` bytes.
fn top_holder(p: &Profile, l: &LineStats, floor: u64) -> bool {
    let held = l.measures.peak_bytes;
    held >= floor && held as f64 >= 0.2 * p.memory.held_peak_bytes() as f64
}

/// numpy constructors whose default dtype is float64.
const FLOAT64_DEFAULTS: [&str; 14] = [
    "np.zeros(",
    "np.ones(",
    "np.empty(",
    "np.full(",
    "np.eye(",
    "np.identity(",
    "np.linspace(",
    "np.random.rand(",
    "np.random.randn(",
    "np.random.random(",
    "np.random.normal(",
    ".standard_normal(",
    ".normal(",
    ".random(",
];

/// The code of a line, without its comment (a `#` outside quotes ends it).
fn code(source: &str) -> &str {
    let mut quote: Option<char> = None;
    for (i, c) in source.char_indices() {
        match (quote, c) {
            (None, '#') => return &source[..i],
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    source
}

/// A top holder made in float64 (said in its text, or numpy's default).
fn float64(p: &Profile, l: &LineStats) -> Option<Hint> {
    if !top_holder(p, l, 64 * MIB) {
        return None;
    }
    let text = code(&l.source);
    let named = text.contains("float64") || text.contains("np.double");
    let default = !text.contains("dtype") && FLOAT64_DEFAULTS.iter().any(|f| text.contains(f));
    if !named && !default {
        return None;
    }
    let held = l.measures.peak_bytes;
    let mut h = at(HintKind::Float64, l);
    h.evidence = format!(
        "holds {} at the peak ({:.0}% of it) in float64{}",
        bytes(held),
        100.0 * held as f64 / p.memory.held_peak_bytes().max(1) as f64,
        if named {
            ""
        } else {
            " (numpy's default dtype)"
        }
    );
    h.suggestion =
        "if float32 precision is enough (it usually is for features, activations and weights), \
         make it `dtype=np.float32`"
            .into();
    h.saving_bytes = Some(held / 2);
    h.saving = format!("{} less at the peak", bytes(held / 2));
    Some(h)
}

/// A line whose live memory keeps growing (flagged as a likely leak).
fn growing(l: &LineStats) -> Option<Hint> {
    let leak = l.measures.leak?;
    let held = l.measures.peak_bytes;
    if held < 16 * MIB {
        return None;
    }
    let mut h = at(HintKind::Growing, l);
    h.evidence = format!(
        "its memory grew all run ({}/s, {} held at the peak) and is rarely freed (likelihood {:.2})",
        bytes(leak.bytes_per_s as u64),
        bytes(held),
        leak.likelihood
    );
    h.suggestion = "something keeps every item made here (a list appended to each step, a \
                    cache): keep only what is needed (`loss.item()`, `t.detach()`), bound it \
                    (`collections.deque(maxlen=...)`) or clear it"
        .into();
    h.saving_bytes = Some(held);
    h.saving = format!("up to {} at the peak, more on longer runs", bytes(held));
    Some(h)
}

/// Python objects held at the peak no larger than this on average are "small".
const SMALL_OBJECT: u64 = 256;

/// A top holder made of many small Python objects.
fn python_objects(p: &Profile, l: &LineStats) -> Option<Hint> {
    let m = &l.measures;
    // Of what it holds, the heap's part (Python objects are never mapped memory).
    let heap = m.peak_bytes.saturating_sub(m.mapped_peak_bytes);
    if !top_holder(p, l, 32 * MIB)
        || is_import(&l.source)
        || (m.alloc_python_bytes as f64) < 0.8 * m.alloc_bytes as f64
        || m.peak_blocks == 0
        || heap / m.peak_blocks > SMALL_OBJECT
    {
        return None;
    }
    let mut h = at(HintKind::PythonObjects, l);
    h.evidence = format!(
        "holds {} at the peak in about {} Python objects of {} on average",
        bytes(heap),
        m.peak_blocks,
        bytes(heap / m.peak_blocks),
    );
    h.suggestion = "numbers in lists, tuples or dicts cost about 32 bytes each (a pointer and \
                    an object); a numpy array (or `array.array`) stores them in 8"
        .into();
    let saving = heap / 4 * 3;
    h.saving_bytes = Some(saving);
    h.saving = format!("about {} less at the peak", bytes(saving));
    Some(h)
}

/// A line running onnxruntime that still holds a large share of what it grew to at the end of
/// the run: the session's CPU arena keeps the chunks it grew for its largest input.
fn onnx_arena(l: &LineStats) -> Option<Hint> {
    let m = &l.measures;
    if !m.native.iter().any(|n| n.library.contains("onnxruntime")) {
        return None;
    }
    let kept = *l.footprint_bytes.last()?;
    let most = l.footprint_bytes.iter().copied().max().unwrap_or(0);
    if kept < 32 * MIB || (kept as f64) < 0.5 * most as f64 {
        return None;
    }
    let mut h = at(HintKind::OnnxArena, l);
    h.evidence = format!(
        "onnxruntime runs here and the line still holds {} at the end of the run (at most {}): \
             its CPU memory arena keeps what it grew to for the largest input",
        bytes(kept),
        bytes(most)
    );
    h.suggestion = "if inputs vary in size, give the CPU provider \
                    `arena_extend_strategy: \"kSameAsRequested\"` (growth by what is asked, not \
                    powers of two), shrink it after large runs with the run option \
                    `memory.enable_memory_arena_shrinkage = \"cpu:0\"`, or turn it off \
                    (`SessionOptions.enable_cpu_mem_arena = False`, at some allocation cost)"
        .into();
    h.saving_bytes = Some(kept);
    h.saving = format!("up to {} held between runs", bytes(kept));
    Some(h)
}

/// Busy threads beyond this many per CPU make a hint.
const BUSY_THREAD_CPU_S: f64 = 0.05;

/// A process running more busy threads at once than there are CPUs (OpenMP, BLAS or
/// intra-op pools). Pools that ran one after the other (xgboost's, then lightgbm's) are not
/// busy at once: `peak_busy_threads` counts the threads busy in one stretch of time.
fn threads(p: &Profile) -> Vec<Hint> {
    if p.cpus == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for proc in &p.processes {
        let busy: Vec<_> = p
            .threads
            .iter()
            .filter(|t| t.pid == proc.pid && t.cpu_python_s + t.cpu_native_s >= BUSY_THREAD_CPU_S)
            .collect();
        let n = proc.peak_busy_threads;
        if n <= p.cpus {
            continue;
        }
        let pool: Vec<_> = busy.iter().filter(|t| !t.python).collect();
        let pool_cpu: f64 = pool.iter().map(|t| t.cpu_native_s + t.cpu_python_s).sum();
        let all_cpu: f64 = busy.iter().map(|t| t.cpu_native_s + t.cpu_python_s).sum();
        if pool.is_empty() || pool_cpu < 0.1 * all_cpu {
            continue;
        }
        let surplus = f64::from(n - p.cpus) / f64::from(n);
        let saving = pool_cpu * surplus;
        out.push(Hint {
            kind: HintKind::Threads,
            pid: Some(proc.pid),
            evidence: format!(
                "pid {} ran {n} busy threads at once ({} native pool threads in all, {} of CPU) \
                 on {} CPUs",
                proc.pid,
                pool.len(),
                seconds(pool_cpu),
                p.cpus
            ),
            suggestion: format!(
                "threads beyond the CPUs wait for each other and spin: set OMP_NUM_THREADS \
                 (and MKL_NUM_THREADS / OPENBLAS_NUM_THREADS), `torch.set_num_threads` or \
                 threadpoolctl to at most {} (divided among processes that run at once)",
                p.cpus
            ),
            saving_s: Some(saving),
            saving: format!(
                "up to {} of CPU spent by the surplus threads",
                seconds(saving)
            ),
            ..Default::default()
        });
    }
    out
}

/// Fork workers that inherited a large heap.
fn fork_inherits(p: &Profile) -> Vec<Hint> {
    let workers: Vec<_> = p
        .processes
        .iter()
        .filter(|q| q.forked && q.inherited_heap_bytes >= 128 * MIB)
        .collect();
    if workers.len() < 2 {
        return Vec::new();
    }
    let inherited = workers
        .iter()
        .map(|q| q.inherited_heap_bytes)
        .max()
        .unwrap_or(0);
    // A worker copies at most the inherited pages it touches: no more than its own RSS.
    let total: u64 = workers
        .iter()
        .map(|q| q.inherited_heap_bytes.min(q.peak_rss_bytes))
        .sum();
    // Where the parent's memory was allocated: its largest holder at the peak.
    let holder = p
        .lines
        .iter()
        .filter(|l| l.line > 0)
        .max_by_key(|l| l.measures.peak_bytes);
    let mut h = match holder {
        Some(l) if l.measures.peak_bytes >= 64 * MIB => at(HintKind::ForkInherits, l),
        _ => Hint {
            kind: HintKind::ForkInherits,
            ..Default::default()
        },
    };
    h.kind = HintKind::ForkInherits;
    h.pid = workers.first().map(|q| q.ppid);
    h.evidence = format!(
        "{} fork workers each inherited up to {} of their parent's heap",
        workers.len(),
        bytes(inherited)
    );
    h.suggestion = "a worker copies every inherited page it touches (reading Python objects \
                    writes their reference counts): start workers (DataLoader iterators, \
                    pools) before loading the data, keep the data in numpy arrays rather than \
                    Python objects, or use the 'forkserver' or 'spawn' start method"
        .into();
    h.saving_bytes = Some(total);
    h.saving = format!("up to {} of copied pages across the workers", bytes(total));
    vec![h]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_lines_are_told() {
        assert!(is_import("import torch"));
        assert!(is_import(
            "from sklearn.ensemble import HistGradientBoostingRegressor  # x"
        ));
        assert!(!is_import("imports = load()"));
        assert!(!is_import("x = [i for i in range(10**7)]  # import later"));
    }

    #[test]
    fn no_hint_text_has_runs_of_spaces() {
        let mut p = Profile::default();
        let mut l = LineStats {
            file: "/w/a.py".into(),
            line: 3,
            ..LineStats::default()
        };
        l.measures.native = vec![crate::model::NativeFrame {
            symbol: "OrtRun".into(),
            library: "libonnxruntime.so".into(),
            cpu_s: 1.0,
        }];
        l.footprint_bytes = vec![100 * MIB, 100 * MIB];
        p.lines.push(l);
        let hints = of(&p);
        assert!(!hints.is_empty());
        for h in hints {
            for text in [&h.evidence, &h.suggestion, &h.saving] {
                assert!(!text.contains("  "), "{text}");
            }
        }
    }

    #[test]
    fn copy_advice_is_for_copies_the_line_makes_not_a_librarys_own() {
        let copying = |library: &str| {
            let mut l = LineStats {
                file: "/w/a.py".into(),
                line: 3,
                ..LineStats::default()
            };
            l.measures.copy_bytes = 700 * MIB;
            l.measures.cpu_native_s = 1.0;
            l.measures.native = vec![crate::model::NativeFrame {
                symbol: "work".into(),
                library: library.into(),
                cpu_s: 0.9,
            }];
            copies(&l)
        };
        assert!(
            copying("libc.so.6").is_some(),
            "numpy's a.copy(): libc's memcpy"
        );
        assert!(copying("_multiarray_umath.cpython-311-x86_64-linux-gnu.so").is_some());
        assert!(copying("_polars_runtime.abi3.so").is_none(), "polars' sort");
    }

    #[test]
    fn fork_workers_cannot_copy_more_than_they_hold() {
        let mut p = Profile::default();
        for pid in [2, 3] {
            p.processes.push(crate::model::Process {
                pid,
                ppid: 1,
                forked: true,
                inherited_heap_bytes: 1024 * MIB,
                peak_rss_bytes: 200 * MIB,
                ..Default::default()
            });
        }
        let h = fork_inherits(&p);
        assert_eq!(h[0].saving_bytes, Some(400 * MIB));
    }

    #[test]
    fn comments_are_not_code() {
        assert_eq!(code("x = np.ones(3)  # float64"), "x = np.ones(3)  ");
        assert_eq!(code("s = '#' + f(x)  # c"), "s = '#' + f(x)  ");
        assert_eq!(code("x = 1"), "x = 1");
    }
}
