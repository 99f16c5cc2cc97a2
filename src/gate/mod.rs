//! Budgets → verdicts: the CI gate. Limits on the process tree's peak heap (exact counters, so
//! repeated runs give the same verdict), peak RSS (noisier: documented as such) and bytes held
//! by lines flagged as likely leaks. Each violation says what, by how much, and where.

pub mod baseline;
pub mod file;
mod gpu;
pub mod report;

use std::collections::BTreeMap;

use crate::model::{Amount, Budget, Profile, Violation};
use crate::units::bytes;

/// Exit code of `mlprof run` / `mlprof check` when a budget is exceeded (and the program itself
/// succeeded: its own failure keeps its own code).
pub const EXIT_BUDGET: i32 = 97;

/// The gate of a command, loaded once (a malformed budget file or baseline is an error before
/// anything runs): its budgets, and the saved profile it must not regress against.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    pub budgets: Budgets,
    pub baseline: Option<Profile>,
    pub tolerance: baseline::Tolerance,
}

impl Gate {
    /// Whether anything is checked.
    pub fn any(&self) -> bool {
        self.budgets.any() || self.baseline.is_some()
    }

    /// Budget verdicts and regressions of `p`.
    pub fn verdicts(&self, p: &Profile) -> Vec<Violation> {
        let mut out = verdicts(p, &self.budgets);
        if let Some(base) = &self.baseline {
            out.extend(baseline::regressions(p, base, &self.tolerance));
        }
        out
    }
}

/// The limits of a run; `None` = no limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Budgets {
    /// Peak heap of the tree.
    pub max_peak_bytes: Option<u64>,
    /// Peak RSS of the tree.
    pub max_rss_bytes: Option<u64>,
    /// Bytes still held at the end by lines flagged as likely leaks.
    pub max_leak_bytes: Option<u64>,
    /// Peak GPU memory of the tree (NVML, per process).
    pub max_gpu_memory_bytes: Option<u64>,
    /// Device memory one process held through its CUDA calls, on any one device.
    pub max_gpu_reserved_bytes: Option<u64>,
    /// Bytes of PyTorch tensors one process had allocated at once on any one device (its
    /// allocator's trace).
    pub max_gpu_allocated_bytes: Option<u64>,
    /// Bytes of tensors a line (`file.py:88`) may hold at its process's GPU peak.
    pub gpu_lines: BTreeMap<String, u64>,
    /// Bytes a line (`file.py:88`, file name or path suffix) may hold at the heap peak.
    pub lines: BTreeMap<String, u64>,
    /// Bytes a function's lines (`file.py::qualname`) may hold at the heap peak.
    pub functions: BTreeMap<String, u64>,
    /// Bytes a file's lines may hold at the heap peak.
    pub files: BTreeMap<String, u64>,
    /// Bytes copied (memcpy family) by the whole tree.
    pub max_copy_bytes: Option<u64>,
    /// CPU seconds (user + kernel) of the tree.
    pub max_cpu_s: Option<f64>,
    /// Path patterns (`*` matches anything) whose lines no budget counts.
    pub ignore: Vec<String>,
}

impl Budgets {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.max_peak_bytes.is_some()
            || self.max_rss_bytes.is_some()
            || self.max_leak_bytes.is_some()
            || self.max_gpu_memory_bytes.is_some()
            || self.max_gpu_reserved_bytes.is_some()
            || self.max_gpu_allocated_bytes.is_some()
            || !self.gpu_lines.is_empty()
            || !(self.lines.is_empty() && self.functions.is_empty() && self.files.is_empty())
            || self.max_copy_bytes.is_some()
            || self.max_cpu_s.is_some()
    }

    /// Flags override the file's tree limits; the file's per-place limits stay.
    pub fn with_flags(mut self, flags: &Budgets) -> Budgets {
        self.max_peak_bytes = flags.max_peak_bytes.or(self.max_peak_bytes);
        self.max_rss_bytes = flags.max_rss_bytes.or(self.max_rss_bytes);
        self.max_leak_bytes = flags.max_leak_bytes.or(self.max_leak_bytes);
        self.max_gpu_memory_bytes = flags.max_gpu_memory_bytes.or(self.max_gpu_memory_bytes);
        self.max_gpu_reserved_bytes = flags.max_gpu_reserved_bytes.or(self.max_gpu_reserved_bytes);
        self.max_gpu_allocated_bytes = flags
            .max_gpu_allocated_bytes
            .or(self.max_gpu_allocated_bytes);
        self
    }
}

/// Every budget `p` exceeds.
pub fn verdicts(p: &Profile, b: &Budgets) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Some(limit) = b.max_peak_bytes.filter(|&l| p.memory.peak_heap_bytes > l) {
        out.push(at(
            violation(
                Budget::PeakHeap,
                "peak heap",
                limit,
                p.memory.peak_heap_bytes,
                &holders(p),
            ),
            p,
            &|_| true,
        ));
    }
    if let Some(limit) = b.max_rss_bytes.filter(|&l| p.memory.peak_rss_bytes > l) {
        out.push(at(
            violation(
                Budget::PeakRss,
                "peak RSS",
                limit,
                p.memory.peak_rss_bytes,
                &holders(p),
            ),
            p,
            &|_| true,
        ));
    }
    if let Some(limit) = b.max_gpu_memory_bytes {
        out.extend(gpu_verdict(p, limit));
    }
    if let Some(limit) = b.max_gpu_reserved_bytes {
        out.extend(gpu::reserved_verdict(p, limit));
    }
    if let Some(limit) = b.max_gpu_allocated_bytes {
        out.extend(gpu::allocated_verdict(p, limit));
    }
    out.extend(gpu::line_verdicts(p, b));
    if let Some(limit) = b.max_leak_bytes {
        let leaking: Vec<(String, u64)> = p
            .lines
            .iter()
            .filter(|l| l.measures.leak.is_some() && !b.ignored(&l.file))
            .map(|l| {
                (
                    place(&l.file, l.line),
                    l.footprint_bytes
                        .last()
                        .copied()
                        .unwrap_or(l.measures.peak_bytes),
                )
            })
            .collect();
        let total: u64 = leaking.iter().map(|(_, b)| b).sum();
        if total > limit {
            let by: Vec<String> = leaking
                .iter()
                .map(|(at, b)| format!("{at} holds {}", bytes(*b)))
                .collect();
            out.push(violation(
                Budget::Leaks,
                "likely leaks",
                limit,
                total,
                &by.join(", "),
            ));
        }
    }
    let copied: u64 = p
        .lines
        .iter()
        .filter(|l| !b.ignored(&l.file))
        .map(|l| l.measures.copy_bytes)
        .sum();
    if let Some(limit) = b.max_copy_bytes.filter(|&l| copied > l) {
        out.push(violation(Budget::Copy, "copy volume", limit, copied, ""));
    }
    let cpu = p.cpu_s();
    if let Some(limit) = b.max_cpu_s.filter(|&l| cpu > l) {
        out.push(Violation {
            budget: Budget::Cpu,
            amount: Amount::Seconds {
                limit_s: limit,
                actual_s: cpu,
            },
            message: format!("budget exceeded: CPU time {cpu:.2} s > {limit:.2} s"),
            file: None,
            line: None,
        });
    }
    out.extend(places(p, b));
    out
}

/// Whether `path` matches a glob pattern where `*` matches any run of characters (a pattern
/// without a leading `/` may match any path suffix that starts after a `/`). Time linear in
/// the path for a given pattern (at most pattern × path steps), whatever the pattern.
pub fn glob(pattern: &str, path: &str) -> bool {
    let mut steps = 0;
    glob_counted(pattern, path, &mut steps)
}

/// [`glob`], counting the matcher's steps (tests bound them).
fn glob_counted(pattern: &str, path: &str, steps: &mut u64) -> bool {
    let (p, s) = (pattern.as_bytes(), path.as_bytes());
    // A suffix after a `/` matching `pattern` is the whole path matching `*/pattern`.
    wildcard(p, s, steps) || (!pattern.starts_with('/') && wildcard(&[b"*/", p].concat(), s, steps))
}

/// `*`-only wildcard match of the whole of `s`: two pointers, and on a mismatch one step back
/// to just after the last `*` seen (which then swallows one more byte). Earlier stars never
/// need revisiting, so this is at most `(p.len() + 1) * (s.len() + 1)` steps, never
/// exponential.
fn wildcard(p: &[u8], s: &[u8], steps: &mut u64) -> bool {
    let (mut pi, mut si) = (0, 0);
    // After the last `*`: where the pattern resumes, and where in `s` that attempt began.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        *steps += 1;
        if pi < p.len() && p[pi] == b'*' {
            pi += 1;
            star = Some((pi, si));
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((after, from)) = star {
            pi = after;
            si = from + 1;
            star = Some((after, si));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

impl Budgets {
    /// Whether lines of `file` are left out of budgets.
    pub fn ignored(&self, file: &str) -> bool {
        self.ignore.iter().any(|pat| glob(pat, file))
    }
}

/// A per-line budget key, `file.py:88`: (file name or path suffix, line).
pub(crate) fn line_key(key: &str) -> Option<(&str, u32)> {
    key.rsplit_once(':')
        .and_then(|(f, l)| Some((f, l.parse::<u32>().ok()?)))
}

/// Whether the profile's `file` is the budget key's `want` (the path, or a suffix after a `/`).
pub(crate) fn same_file(file: &str, want: &str) -> bool {
    file == want || file.ends_with(&format!("/{want}"))
}

/// Per-line, per-function and per-file limits on bytes held at the heap peak.
fn places(p: &Profile, b: &Budgets) -> Vec<Violation> {
    let matches = same_file;
    let held = |keep: &dyn Fn(&crate::model::LineStats) -> bool| -> u64 {
        p.lines
            .iter()
            .filter(|l| keep(l) && !b.ignored(&l.file))
            .map(|l| l.measures.peak_bytes)
            .sum()
    };
    let mut out = Vec::new();
    for (key, &limit) in &b.lines {
        let Some((file, line)) = line_key(key) else {
            continue;
        };
        let bytes_held = held(&|l| l.line == line && matches(&l.file, file));
        if bytes_held > limit {
            out.push(at(
                violation(Budget::Line, &format!("{key} held"), limit, bytes_held, ""),
                p,
                &|l| l.line == line && matches(&l.file, file),
            ));
        }
    }
    for (key, &limit) in &b.functions {
        let Some((file, function)) = key.split_once("::") else {
            continue;
        };
        let bytes_held = held(&|l| l.function == function && matches(&l.file, file));
        if bytes_held > limit {
            out.push(at(
                violation(
                    Budget::Function,
                    &format!("{key} held"),
                    limit,
                    bytes_held,
                    "",
                ),
                p,
                &|l| l.function == function && matches(&l.file, file),
            ));
        }
    }
    for (key, &limit) in &b.files {
        let bytes_held = held(&|l| matches(&l.file, key));
        if bytes_held > limit {
            out.push(at(
                violation(Budget::File, &format!("{key} held"), limit, bytes_held, ""),
                p,
                &|l| matches(&l.file, key),
            ));
        }
    }
    out
}

pub(crate) fn violation(
    budget: Budget,
    what: &str,
    limit: u64,
    actual: u64,
    whereabouts: &str,
) -> Violation {
    let mut message = format!(
        "budget exceeded: {what} {} > {}",
        bytes(actual),
        bytes(limit)
    );
    if !whereabouts.is_empty() {
        message.push_str(&format!(" ({whereabouts})"));
    }
    Violation {
        budget,
        amount: Amount::Bytes {
            limit_bytes: limit,
            actual_bytes: actual,
        },
        message,
        file: None,
        line: None,
    }
}

/// The violation, located at the line holding most of what it counts.
fn at(mut v: Violation, p: &Profile, keep: &dyn Fn(&crate::model::LineStats) -> bool) -> Violation {
    let top = p
        .lines
        .iter()
        .filter(|l| keep(l) && l.line > 0)
        .max_by_key(|l| l.measures.peak_bytes);
    if let Some(top) = top {
        v.file = Some(top.file.clone());
        v.line = Some(top.line);
    }
    v
}

/// The GPU memory budget: exceeded when the tree's peak is above it; also a violation when the
/// GPU could not be polled (a budget that cannot be checked must not pass silently).
fn gpu_verdict(p: &Profile, limit: u64) -> Option<Violation> {
    let unchecked = if !p.gpu.available {
        Some(format!(
            "GPU not available: {}",
            p.gpu.reason.as_deref().unwrap_or("unknown reason")
        ))
    } else if p.gpu.timeline.is_empty() {
        Some("no GPU poll succeeded".to_string())
    } else if p.gpu.peak_memory_bytes == 0 && !p.gpu.notes.is_empty() {
        Some(p.gpu.notes.join("; "))
    } else {
        None
    };
    if let Some(why) = unchecked {
        let mut v = violation(Budget::PeakGpuMemory, "peak GPU memory", limit, 0, "");
        v.message = format!("budget not checked: peak GPU memory ({why})");
        return Some(v);
    }
    if p.gpu.peak_memory_bytes <= limit {
        return None;
    }
    let mut top: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.measures.gpu_memory_bytes > 0 && l.line > 0)
        .collect();
    top.sort_by_key(|l| std::cmp::Reverse(l.measures.gpu_memory_bytes));
    let grew: Vec<String> = top
        .iter()
        .take(3)
        .map(|l| {
            format!(
                "{} grew it {}",
                place(&l.file, l.line),
                bytes(l.measures.gpu_memory_bytes)
            )
        })
        .collect();
    let mut v = violation(
        Budget::PeakGpuMemory,
        "peak GPU memory",
        limit,
        p.gpu.peak_memory_bytes,
        &grew.join(", "),
    );
    if let Some(l) = top.first() {
        v.file = Some(l.file.clone());
        v.line = Some(l.line);
    }
    Some(v)
}

/// The three lines holding most at the heap peak: `train.py:88 held 3.9 GiB, ...`.
fn holders(p: &Profile) -> String {
    let mut top: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.measures.peak_bytes > 0)
        .collect();
    top.sort_by_key(|l| std::cmp::Reverse(l.measures.peak_bytes));
    top.iter()
        .take(3)
        .map(|l| {
            format!(
                "{} held {}",
                place(&l.file, l.line),
                bytes(l.measures.peak_bytes)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn place(file: &str, line: u32) -> String {
    format!("{}:{line}", file.rsplit('/').next().unwrap_or(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LineStats, SCHEMA};

    #[test]
    fn globs_match_paths_and_suffixes() {
        assert!(glob("tests/*", "/repo/tests/test_a.py"));
        assert!(glob("*.py", "/repo/a.py"));
        assert!(glob("/repo/*", "/repo/x/y.py"));
        assert!(!glob("/other/*", "/repo/x.py"));
        assert!(!glob("tests/*", "/repo/src/a.py"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b*c", "aXbYcd"));
        assert!(glob("*b", "abb"));
        assert!(glob("a.py", "/x/a.py"));
        assert!(!glob("a.py", "/x/ba.py"));
        assert!(glob("**x**", "/x"));
        assert!(!glob("/a", "/b/a"));
    }

    /// The old recursive matcher took exponential time on many stars that cannot match (7
    /// stars: 25 s; this one would never finish): the matcher's steps are bounded by pattern ×
    /// path, and it answers correctly.
    #[test]
    fn globs_with_many_stars_take_bounded_steps() {
        let pattern = format!("{}b", "a*".repeat(30));
        let path = "a".repeat(200);
        let mut steps = 0;
        assert!(!glob_counted(&pattern, &path, &mut steps));
        let bound = 2 * (pattern.len() as u64 + 3) * (path.len() as u64 + 1);
        assert!(steps <= bound, "{steps} steps > {bound}");
        assert!(glob(&pattern, &format!("{path}b")));
        assert!(glob(&format!("{}*", "*".repeat(40)), &path));
    }

    /// Against a dynamic-programming reference, on short random patterns and paths.
    #[test]
    fn globs_agree_with_a_reference_matcher() {
        fn reference(p: &[u8], s: &[u8]) -> bool {
            // m[i][j]: p[..i] matches s[..j].
            let mut m = vec![vec![false; s.len() + 1]; p.len() + 1];
            m[0][0] = true;
            for i in 1..=p.len() {
                for j in 0..=s.len() {
                    m[i][j] = if p[i - 1] == b'*' {
                        m[i - 1][j] || (j > 0 && m[i][j - 1])
                    } else {
                        j > 0 && m[i - 1][j - 1] && p[i - 1] == s[j - 1]
                    };
                }
            }
            m[p.len()][s.len()]
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..20_000 {
            let word = |len: u64, next: &mut dyn FnMut(u64) -> u64, alphabet: &[u8]| -> String {
                (0..len)
                    .map(|_| alphabet[next(alphabet.len() as u64) as usize] as char)
                    .collect()
            };
            let plen = next(7);
            let pattern = word(plen, &mut next, b"ab/*");
            let slen = next(9);
            let path = word(slen, &mut next, b"ab/");
            let (p, s) = (pattern.as_bytes(), path.as_bytes());
            let want = reference(p, s)
                || (!pattern.starts_with('/')
                    && (0..s.len()).any(|i| s[i] == b'/' && reference(p, &s[i + 1..])));
            assert_eq!(glob(&pattern, &path), want, "{pattern:?} on {path:?}");
        }
    }

    #[test]
    fn copy_cpu_and_ignored_lines() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            cpu_user_s: 10.0,
            cpu_kernel_s: 2.0,
            ..Profile::default()
        };
        let mut hot = LineStats {
            file: "/repo/tests/test_big.py".into(),
            line: 5,
            ..LineStats::default()
        };
        hot.measures.peak_bytes = 4 << 30;
        hot.measures.copy_bytes = 8 << 30;
        p.lines.push(hot);
        let mut b = Budgets {
            max_cpu_s: Some(11.0),
            max_copy_bytes: Some(1 << 30),
            ..Budgets::default()
        };
        b.files.insert("test_big.py".into(), 1 << 30);
        let kinds: Vec<&str> = verdicts(&p, &b).iter().map(|v| v.budget.as_str()).collect();
        assert_eq!(kinds, ["copy", "cpu", "file"]);
        b.ignore.push("tests/*".into());
        let verdicts = verdicts(&p, &b);
        let kinds: Vec<&str> = verdicts.iter().map(|v| v.budget.as_str()).collect();
        assert_eq!(kinds, ["cpu"], "ignored lines count for no budget");
        let seconds = Amount::Seconds {
            limit_s: 11.0,
            actual_s: p.cpu_s(),
        };
        assert_eq!(verdicts[0].amount, seconds, "a CPU budget in seconds");
    }

    /// The `budget` names docs/profile-schema.md lists, one per limit.
    #[test]
    fn each_budget_has_its_name() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            cpu_user_s: 10.0,
            ..Profile::default()
        };
        p.memory.peak_heap_bytes = 8 << 30;
        p.memory.peak_rss_bytes = 9 << 30;
        let mut l = LineStats {
            file: "/w/train.py".into(),
            line: 88,
            function: "step".into(),
            ..LineStats::default()
        };
        l.measures.peak_bytes = 4 << 30;
        l.measures.copy_bytes = 4 << 30;
        l.measures.leak = Some(crate::model::Leak::default());
        p.lines.push(l);
        let mut b = Budgets {
            max_peak_bytes: Some(1),
            max_rss_bytes: Some(1),
            max_leak_bytes: Some(1),
            max_gpu_memory_bytes: Some(1),
            max_copy_bytes: Some(1),
            max_cpu_s: Some(1.0),
            ..Budgets::default()
        };
        b.lines.insert("train.py:88".into(), 1);
        b.functions.insert("train.py::step".into(), 1);
        b.files.insert("train.py".into(), 1);
        let kinds: Vec<&str> = verdicts(&p, &b).iter().map(|v| v.budget.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "peak_heap",
                "peak_rss",
                "peak_gpu_memory",
                "leaks",
                "copy",
                "cpu",
                "line",
                "function",
                "file"
            ]
        );
        let mut grown = p.clone();
        grown.memory.peak_heap_bytes = 16 << 30;
        grown.lines[0].measures.peak_bytes = 16 << 30;
        let kinds: Vec<&str> = baseline::regressions(&grown, &p, &baseline::Tolerance::default())
            .iter()
            .map(|v| v.budget.as_str())
            .collect();
        assert_eq!(kinds, ["baseline_peak_heap", "baseline_line"]);
    }

    #[test]
    fn exceeded_budgets_name_the_lines_that_hold_memory() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            ..Profile::default()
        };
        p.memory.peak_heap_bytes = 7 << 30;
        let mut l = LineStats {
            file: "/w/train.py".into(),
            line: 88,
            ..LineStats::default()
        };
        l.measures.peak_bytes = 4 << 30;
        p.lines.push(l);
        let b = Budgets {
            max_peak_bytes: Some(6 << 30),
            ..Budgets::default()
        };
        let v = verdicts(&p, &b);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "budget exceeded: peak heap 7.0 GiB > 6.0 GiB (train.py:88 held 4.0 GiB)"
        );
        assert!(verdicts(
            &p,
            &Budgets {
                max_peak_bytes: Some(8 << 30),
                ..Budgets::default()
            }
        )
        .is_empty());
    }
}
