//! The terminal report: a summary header, the process tree, CPU by line (with the native
//! functions under each), by function and by thread, and warnings.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use crate::model::{Exit, Idle, Measures, Profile};
use crate::sanitize::{clean, Clean};
use crate::units::{bytes, seconds};

/// How the report is shown: colour (a terminal, and `NO_COLOR` unset) and the width to fit
/// (`None`: do not cut lines, e.g. when piped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Use ANSI colours.
    pub color: bool,
    /// Terminal width in characters.
    pub width: Option<usize>,
}

/// Render the terminal report in `style`: lines longer than the width lose the end of their
/// source text (the numbers come first, so they are never cut).
pub fn render_styled(p: &Profile, style: Style) -> String {
    let marked = render_marked(p);
    let mut out = String::with_capacity(marked.len());
    for marked_line in marked.lines() {
        let line = marked_line.replace(SOURCE, "");
        let fitted = match style.width {
            Some(w) if line.chars().count() > w => fit(marked_line, w),
            _ => line.clone(),
        };
        let line = line.as_str();
        match (style.color, ansi(line)) {
            (true, Some(code)) => out.push_str(&format!("{code}{fitted}\x1b[0m")),
            _ => out.push_str(&fitted),
        }
        out.push('\n');
    }
    out
}

/// The ANSI style of a (plain, uncut) report line: section titles bold, warnings yellow,
/// leaks red, native functions under a line dim.
fn ansi(line: &str) -> Option<&'static str> {
    if line.starts_with("warning:") {
        Some("\x1b[33m")
    } else if !line.is_empty() && !line.starts_with(' ') {
        Some("\x1b[1m")
    } else if line.contains("likelihood") && line.contains("growing") {
        Some("\x1b[31m")
    } else if line.starts_with("                ") && line.ends_with(')') && line.contains('%') {
        Some("\x1b[2m")
    } else {
        None
    }
}

/// Marks where a row's source text starts: only what follows may be cut to fit a width.
const SOURCE: char = '\u{1}';

/// Cut a marked line to `width` characters: from its source text if it has one (never the
/// numbers before it: a row too wide for them is left to wrap), else from its end.
fn fit(marked: &str, width: usize) -> String {
    let (numbers, source) = match marked.split_once(SOURCE) {
        Some((numbers, source)) => (numbers, Some(source)),
        None => (marked, None),
    };
    let room = width.saturating_sub(numbers.chars().count());
    match source {
        Some(src) if src.chars().count() <= room => format!("{numbers}{src}"),
        Some(src) if room > 1 => format!(
            "{numbers}{}…",
            src.chars().take(room - 1).collect::<String>()
        ),
        Some(_) => numbers.trim_end().to_string(),
        None => {
            let mut cut: String = marked.chars().take(width.saturating_sub(1)).collect();
            cut.push('…');
            cut
        }
    }
}

/// Render the terminal report, plain and uncut.
pub fn render(p: &Profile) -> String {
    render_marked(p).replace(SOURCE, "")
}

/// The report with [`SOURCE`] marks.
fn render_marked(p: &Profile) -> String {
    let mut out = String::new();
    header(&mut out, p);
    if !p.ranks.is_empty() {
        ranks(&mut out, p);
    }
    if p.processes.len() > 1 {
        processes(&mut out, p);
    }
    lines(&mut out, p);
    functions(&mut out, p);
    threads(&mut out, p);
    memory_lines(&mut out, p);
    leaks(&mut out, p);
    regions(&mut out, p);
    hints(&mut out, p);
    for warning in &p.warnings {
        let _ = writeln!(out, "warning: {}", Clean(warning));
    }
    out
}

fn header(out: &mut String, p: &Profile) {
    let cpu = p.cpu_s();
    let m = &p.memory;
    let _ = writeln!(out, "mlprof: {}", Clean(&p.command.join(" ")));
    if p.attached {
        let _ = writeln!(out, "  exit            (attached; it ran on)");
    } else {
        let _ = writeln!(out, "  exit            {}", exit(&p.exit));
    }
    let _ = writeln!(out, "  wall time       {}", seconds(p.wall_s));
    let _ = writeln!(
        out,
        "  CPU time        {} (user {}, kernel {}{})",
        seconds(cpu),
        seconds(p.cpu_user_s),
        seconds(p.cpu_kernel_s),
        if p.cpu_unreaped_s >= 0.01 {
            format!(
                "; {} in processes reaped outside the command",
                seconds(p.cpu_unreaped_s)
            )
        } else {
            String::new()
        }
    );
    if p.attached {
        let _ = writeln!(
            out,
            "  peak heap       not measured (attached to a running process)"
        );
        let _ = writeln!(out, "  peak RSS        {}", bytes(m.peak_rss_bytes));
    } else {
        let _ = writeln!(
            out,
            "  peak heap       {} at {}",
            bytes(m.peak_heap_bytes),
            seconds(m.peak_at_s)
        );
        let _ = writeln!(
            out,
            "  peak RSS        {} ({} of it not in the counted heap or mappings)",
            bytes(m.peak_rss_bytes),
            bytes(m.unaccounted_bytes)
        );
        if m.peak_mapped_bytes > 0 {
            let _ = writeln!(
                out,
                "  peak mapped     {} (anonymous mmap outside malloc, apart from the heap; counted when mapped, resident or not)",
                bytes(m.peak_mapped_bytes)
            );
            if m.peak_counted_bytes > 0 {
                let _ = writeln!(
                    out,
                    "  peak counted    {} (heap and mapped together, mapped as far as resident)",
                    bytes(m.peak_counted_bytes)
                );
            }
        }
    }
    let gpu = if p.gpu.available {
        let names: Vec<String> = p
            .gpu
            .devices
            .iter()
            .map(|d| format!("{} ({})", Clean(&d.name), bytes(d.memory_total_bytes)))
            .collect();
        format!(
            "{}: peak memory {} (this process tree), average utilisation {:.0}%",
            names.join(", "),
            bytes(p.gpu.peak_memory_bytes),
            p.gpu.average_util_pct
        )
    } else {
        format!(
            "not available ({})",
            Clean(p.gpu.reason.as_deref().unwrap_or("unknown reason"))
        )
    };
    let _ = writeln!(out, "  GPU             {gpu}");
    for note in &p.gpu.notes {
        let _ = writeln!(out, "                  {}", Clean(note));
    }
    super::gpu_text::summary(out, p);
    let _ = writeln!(out, "  dropped events  {}", p.dropped_events);
}

/// Lines below this share of the sampled time are left out of the tables.
const MIN_SHARE: f64 = 0.005;
/// Source text is cut to this many characters.
const SOURCE_CHARS: usize = 60;

fn total_time(m: &Measures) -> f64 {
    m.cpu_python_s + m.cpu_native_s + m.cpu_system_s
}

fn pct(part: f64, whole: f64) -> String {
    if whole <= 0.0 {
        return "-".to_string();
    }
    format!("{:.0}%", 100.0 * part / whole)
}

/// Whether a line shows in the per-line table: enough time, or enough memory activity.
fn shown(l: &crate::model::LineStats, whole_s: f64, whole_bytes: u64) -> bool {
    let m = &l.measures;
    total_time(m) >= MIN_SHARE * whole_s
        || (whole_bytes > 0 && m.alloc_bytes as f64 >= MIN_SHARE * whole_bytes as f64)
        || m.peak_bytes > 0
        || m.copy_bytes > 0
        || m.mapped_peak_bytes > 0
        || !m.gpu_calls.is_empty()
}

/// One table per file, a row per line: time by kind (shares of the sampled time), then memory
/// (allocated, Python share, held at the peak, copies per second, footprint, leak mark), then
/// the source; the top native functions under their line.
fn lines(out: &mut String, p: &Profile) {
    let whole: f64 = p.lines.iter().map(|l| total_time(&l.measures)).sum();
    let whole_bytes: u64 = p.lines.iter().map(|l| l.measures.alloc_bytes).sum();
    let mapped = p.lines.iter().any(|l| l.measures.mapped_peak_bytes > 0);
    if whole <= 0.0 && whole_bytes == 0 && !mapped {
        return;
    }
    let _ = writeln!(
        out,
        "\nBy line ({} sampled in {} samples; time as shares of it; memory sampled, held = live at the heap peak{})",
        seconds(whole),
        p.cpu_samples,
        if mapped {
            ", mapped = anonymous mmap held at its own peak"
        } else {
            ""
        }
    );
    let gpu = gpu_columns(p);
    let mut file = "";
    for line in p.lines.iter().filter(|l| shown(l, whole, whole_bytes)) {
        if line.file != file {
            file = &line.file;
            let _ = writeln!(out, "  {}", Clean(file));
            let _ = writeln!(
                out,
                "    {:>6} {:>6} {:>6} {:>6} {:>8} {:>10} {:>4} {:>10} {}{:>10} {:<10} {:<4} {}source",
                "line",
                "Python",
                "native",
                "system",
                "time",
                "allocated",
                "Py",
                "held",
                if mapped {
                    format!("{:>10} ", "mapped")
                } else {
                    String::new()
                },
                "copy/s",
                "footprint",
                "leak",
                if gpu {
                    format!("{:>5} {:>10} ", "GPU%", "GPU mem")
                } else {
                    String::new()
                }
            );
        }
        let m = &line.measures;
        let source = source_text(&line.source);
        let python_share = if m.alloc_bytes > 0 {
            pct(m.alloc_python_bytes as f64, m.alloc_bytes as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "    {:>6} {:>6} {:>6} {:>6} {:>8} {:>10} {:>4} {:>10} {}{:>10} {:<10} {:<4} {}\u{1}{}",
            line.line,
            pct(m.cpu_python_s, whole),
            pct(m.cpu_native_s, whole),
            pct(m.cpu_system_s, whole),
            seconds(total_time(m)),
            bytes(m.alloc_bytes),
            python_share,
            bytes(m.peak_bytes),
            if mapped {
                format!("{:>10} ", bytes(m.mapped_peak_bytes))
            } else {
                String::new()
            },
            rate(m.copy_bytes, p.wall_s),
            sparkline(&line.footprint_bytes),
            if m.leak.is_some() { "leak" } else { "" },
            if gpu {
                format!(
                    "{:>5} {:>10} ",
                    format!("{:.0}%", m.gpu_util_pct),
                    bytes(m.gpu_memory_bytes)
                )
            } else {
                String::new()
            },
            if source.is_empty() {
                clean(&line.function)
            } else {
                source.into()
            }
        );
        if let Some(row) = super::gpu_text::line_row(&m.gpu_calls) {
            let _ = writeln!(out, "    {:>6} {:>6} {:>6}   \u{1}{row}", "", "", "");
        }
        if m.waiting_for_workers_s >= MIN_SHARE * whole {
            let _ = writeln!(
                out,
                "    {:>6} {:>6} {:>6}   \u{1}waiting for worker processes ({})",
                "",
                "",
                pct(m.waiting_for_workers_s, whole),
                seconds(m.waiting_for_workers_s)
            );
        }
        for native in m
            .native
            .iter()
            .filter(|n| n.cpu_s >= MIN_SHARE * whole)
            .take(3)
        {
            let _ = writeln!(
                out,
                "    {:>6} {:>6} {:>6}   \u{1}{} ({})",
                "",
                "",
                pct(native.cpu_s, whole),
                Clean(&native.symbol),
                Clean(&native.library)
            );
        }
    }
}

/// Whether the line tables get GPU columns: only when GPU figures were attributed to lines.
fn gpu_columns(p: &Profile) -> bool {
    p.gpu.available
        && p.lines
            .iter()
            .any(|l| l.measures.gpu_util_pct > 0.0 || l.measures.gpu_memory_bytes > 0)
}

fn functions(out: &mut String, p: &Profile) {
    let whole: f64 = p.functions.iter().map(|f| total_time(&f.measures)).sum();
    if whole <= 0.0 {
        return;
    }
    let mut top: Vec<_> = p
        .functions
        .iter()
        .filter(|f| total_time(&f.measures) >= MIN_SHARE * whole)
        .collect();
    top.sort_by(|a, b| total_time(&b.measures).total_cmp(&total_time(&a.measures)));
    let _ = writeln!(out, "\nCPU by function");
    let _ = writeln!(
        out,
        "    {:>7} {:>7} {:>7} {:>9}  function",
        "Python", "native", "system", "time"
    );
    for f in top.iter().take(20) {
        let m = &f.measures;
        let _ = writeln!(
            out,
            "    {:>7} {:>7} {:>7} {:>9}  {} ({}:{})",
            pct(m.cpu_python_s, whole),
            pct(m.cpu_native_s, whole),
            pct(m.cpu_system_s, whole),
            seconds(total_time(m)),
            Clean(&f.function),
            Clean(&f.file),
            f.line
        );
    }
}

/// The lines holding the most memory at the heap peak.
fn memory_lines(out: &mut String, p: &Profile) {
    let mut top: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.measures.peak_bytes > 0)
        .collect();
    if top.is_empty() {
        return;
    }
    top.sort_by_key(|l| std::cmp::Reverse(l.measures.peak_bytes));
    let _ = writeln!(
        out,
        "\nHeld at the heap peak ({} at {})",
        bytes(p.memory.peak_heap_bytes),
        seconds(p.memory.peak_at_s)
    );
    for l in top.iter().take(10) {
        let _ = writeln!(
            out,
            "    {:>11}  {}:{}  \u{1}{}",
            bytes(l.measures.peak_bytes),
            Clean(short(&l.file)),
            l.line,
            source_text(&l.source)
        );
    }
}

fn leaks(out: &mut String, p: &Profile) {
    let leaking: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.measures.leak.is_some())
        .collect();
    if leaking.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nLikely leaks");
    for l in leaking {
        let Some(leak) = l.measures.leak else {
            continue;
        };
        let _ = writeln!(
            out,
            "    {}:{}  likelihood {:.0}%, growing {}/s  {}",
            Clean(short(&l.file)),
            l.line,
            leak.likelihood * 100.0,
            bytes(leak.bytes_per_s.max(0.0) as u64),
            Clean(l.source.trim())
        );
    }
}

fn hints(out: &mut String, p: &Profile) {
    if p.hints.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nHints (--no-hints to leave out)");
    for h in &p.hints {
        let place = match (&h.file, h.line, h.pid) {
            (Some(file), Some(line), _) => format!("{}:{line}", short(file)),
            (_, _, Some(pid)) => format!("pid {pid}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  - {}{}: {}",
            Clean(&place),
            h.source
                .as_deref()
                .map(|s| format!("  `{}`", Clean(s)))
                .unwrap_or_default(),
            Clean(&h.evidence)
        );
        let _ = writeln!(
            out,
            "    {}; saving: {}",
            Clean(&h.suggestion),
            Clean(&h.saving)
        );
    }
}

/// Regions shown in the text report (the largest peaks); the JSON profile has them all.
const REGIONS_SHOWN: usize = 20;

fn regions(out: &mut String, p: &Profile) {
    if p.regions.is_empty() {
        return;
    }
    let mut shown: Vec<_> = p.regions.iter().collect();
    shown.sort_by(|a, b| {
        (b.peak_bytes + b.children_peak_bytes)
            .cmp(&(a.peak_bytes + a.children_peak_bytes))
            .then(a.start_s.total_cmp(&b.start_s))
    });
    let more = shown.len().saturating_sub(REGIONS_SHOWN);
    shown.truncate(REGIONS_SHOWN);
    let _ = writeln!(
        out,
        "\nRegions ({} marked; peak and net: exact heap above the region's start)",
        p.regions.len()
    );
    let _ = writeln!(
        out,
        "  {:<40} {:>8} {:>9} {:>11} {:>11} {:>8} {:>8} {:>8}  held most at the peak",
        "region", "pid", "time", "peak", "net", "Python", "native", "waiting"
    );
    for r in shown {
        let name: String = r.name.chars().take(40).collect();
        let top = r.held_at_peak.first().map_or(String::new(), |l| {
            format!("{}:{} {}", Clean(short(&l.file)), l.line, bytes(l.bytes))
        });
        let children = if r.children_peak_bytes > 0 {
            format!(" (+{} in children)", bytes(r.children_peak_bytes))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:<40} {:>8} {:>9} {:>11} {:>11} {:>8} {:>8} {:>8}  {}{}{}",
            Clean(&name),
            r.pid,
            seconds(r.duration_s),
            bytes(r.peak_bytes),
            signed_bytes(r.end_bytes),
            seconds(r.cpu_python_s),
            seconds(r.cpu_native_s),
            seconds(r.cpu_system_s),
            top,
            children,
            if r.ended { "" } else { " (did not end)" }
        );
        if let Some(row) = super::gpu_text::line_row(&r.gpu_calls) {
            let _ = writeln!(out, "  {:<40} {row}", "");
        }
    }
    if more > 0 {
        let _ = writeln!(out, "  ... {more} more in the JSON profile (`regions`)");
    }
}

fn signed_bytes(n: i64) -> String {
    if n < 0 {
        format!("-{}", bytes(n.unsigned_abs()))
    } else {
        bytes(n as u64)
    }
}

/// A line's source text for a table: trimmed, cut to [`SOURCE_CHARS`], control characters
/// escaped.
fn source_text(source: &str) -> String {
    let cut: String = source.trim().chars().take(SOURCE_CHARS).collect();
    clean(&cut).into_owned()
}

/// Bytes per second over the run: `12.0 MiB/s`.
fn rate(bytes_total: u64, wall_s: f64) -> String {
    if bytes_total == 0 || wall_s <= 0.0 {
        return "0 B/s".to_string();
    }
    format!("{}/s", bytes((bytes_total as f64 / wall_s) as u64))
}

/// The file name without its directories.
fn short(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// A line's footprint as a sparkline of ten characters.
fn sparkline(values: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return String::new();
    }
    let step = values.len().div_ceil(10).max(1);
    values
        .chunks(step)
        .map(|c| {
            let v = c.iter().copied().max().unwrap_or(0);
            BARS[((v as f64 / max as f64) * 7.0).round() as usize]
        })
        .collect()
}

fn threads(out: &mut String, p: &Profile) {
    if p.threads.len() < 2 {
        return;
    }
    let _ = writeln!(out, "\nThreads ({})", p.threads.len());
    let _ = writeln!(
        out,
        "  {:>7} {:>7} {:>7} {:>9} {:>9} {:>9}",
        "pid", "tid", "kind", "Python", "native", "waiting"
    );
    let mut sorted: Vec<_> = p.threads.iter().collect();
    sorted.sort_by(|a, b| {
        let t = |x: &&crate::model::ThreadStats| x.cpu_python_s + x.cpu_native_s + x.cpu_system_s;
        t(b).total_cmp(&t(a))
    });
    for t in sorted.iter().take(20) {
        let _ = writeln!(
            out,
            "  {:>7} {:>7} {:>7} {:>9} {:>9} {:>9}",
            t.pid,
            t.tid,
            if t.python { "Python" } else { "native" },
            seconds(t.cpu_python_s),
            seconds(t.cpu_native_s),
            seconds(t.cpu_system_s)
        );
    }
    let waited: f64 = p.threads.iter().map(|t| t.cpu_system_s).sum();
    let on_lines: f64 = p.lines.iter().map(|l| l.measures.cpu_system_s).sum();
    if p.idle == Idle::All {
        let _ = writeln!(
            out,
            "  every thread's waiting is counted on its lines (--idle)"
        );
    } else if p.idle == Idle::Main && waited - on_lines >= 0.01 {
        let _ = writeln!(
            out,
            "  {} of waiting by threads idle while their main thread ran is listed here only \
             (--idle counts it on lines)",
            seconds(waited - on_lines)
        );
    }
}

/// A merged profile's inputs, then their sum.
fn ranks(out: &mut String, p: &Profile) {
    let merged = p.ranks.iter().any(|r| !r.source.is_empty());
    let _ = writeln!(
        out,
        "\nRanks ({}{})",
        p.ranks.len(),
        if merged { ", merged" } else { "" }
    );
    for s in p.stragglers.iter().take(5) {
        let what = if s.waiting { "waits" } else { "spends" };
        let _ = writeln!(
            out,
            "  {} {what} {} more than the other ranks' median ({}) at {}:{}  {}\u{1}",
            Clean(&s.name),
            seconds(s.excess_s),
            seconds(s.median_s),
            Clean(&s.file),
            s.line,
            source_text(&s.source)
        );
    }
    for m in p.memory_imbalance.iter().take(3) {
        let _ = writeln!(
            out,
            "  {} holds {} more at its heap peak than the other ranks' median ({}); {} of it at {}:{}  {}\u{1}",
            Clean(&m.name),
            bytes(m.excess_bytes),
            bytes(m.median_bytes),
            bytes(m.line_excess_bytes),
            Clean(&m.file),
            m.line,
            source_text(&m.source)
        );
    }
    let _ = writeln!(
        out,
        "  {:<16} {:>8} {:>8} {:>8} {:>10} {:>11} {:>11} {:>9} {:>5} {:>8}  {}",
        "rank",
        "Python",
        "native",
        "waiting",
        "collective",
        "peak heap",
        "peak RSS",
        "wall",
        "procs",
        "exit",
        if merged { "source" } else { "pids" }
    );
    for r in &p.ranks {
        let pids: Vec<String> = r.pids.iter().map(|p| p.to_string()).collect();
        let _ = writeln!(
            out,
            "  {:<16} {:>8} {:>8} {:>8} {:>10} {:>11} {:>11} {:>9} {:>5} {:>8}  {}",
            Clean(&r.name),
            seconds(r.cpu_python_s),
            seconds(r.cpu_native_s),
            seconds(r.cpu_system_s),
            seconds(r.collective_s),
            bytes(r.peak_heap_bytes),
            bytes(r.peak_rss_bytes),
            seconds(r.wall_s),
            r.processes,
            exit(&r.exit),
            if merged {
                Clean(&r.source).to_string()
            } else {
                pids.join(" ")
            }
        );
    }
    let sum = |f: fn(&crate::model::Rank) -> f64| p.ranks.iter().map(f).sum::<f64>();
    let _ = writeln!(
        out,
        "  {:<16} {:>8} {:>8} {:>8} {:>10} {:>11} {:>11} {:>9} {:>5}",
        "sum",
        seconds(sum(|r| r.cpu_python_s)),
        seconds(sum(|r| r.cpu_native_s)),
        seconds(sum(|r| r.cpu_system_s)),
        seconds(sum(|r| r.collective_s)),
        bytes(p.ranks.iter().map(|r| r.peak_heap_bytes).sum()),
        bytes(p.ranks.iter().map(|r| r.peak_rss_bytes).sum()),
        seconds(p.wall_s),
        p.ranks.iter().map(|r| r.processes).sum::<usize>(),
    );
}

fn processes(out: &mut String, p: &Profile) {
    let _ = writeln!(out, "\nProcesses ({})", p.processes.len());
    let ranked = p.processes.iter().any(|q| q.rank.is_some());
    let _ = writeln!(
        out,
        "  {}{:>7} {:>7} {:>8} {:>11} {:>11} {:>9} {:>10}  command",
        if ranked { "rank        " } else { "" },
        "pid",
        "ppid",
        "python",
        "peak heap",
        "peak RSS",
        "CPU",
        "exit"
    );
    let groups = folded(p);
    for (i, proc) in p.processes.iter().enumerate() {
        match groups.get(&i) {
            Some(Fold::Into) => continue,
            Some(Fold::Head(members)) => {
                fold_row(out, p, members, ranked);
                continue;
            }
            None => {}
        }
        let rank = match (&proc.rank, ranked) {
            (Some(r), _) => format!("{:<11.11} ", Clean(r)),
            (None, true) => format!("{:<11} ", "-"),
            (None, false) => String::new(),
        };
        let _ = writeln!(
            out,
            "  {rank}{:>7} {:>7} {:>8} {:>11} {:>11} {:>9} {:>10}  {}",
            proc.pid,
            proc.ppid,
            Clean(proc.python.as_deref().unwrap_or("-")),
            bytes(proc.peak_heap_bytes),
            bytes(proc.peak_rss_bytes),
            seconds(proc.cpu_s),
            if proc.still_running {
                "running".to_string()
            } else {
                exit(&proc.exit)
            },
            if proc.forked && proc.inherited_heap_bytes > 0 {
                format!(
                    "(fork: {} of the peak heap inherited) {}",
                    bytes(proc.inherited_heap_bytes),
                    Clean(&proc.command.join(" "))
                )
            } else if proc.waiting_for_children_s > 0.0 {
                format!(
                    "(waited {} for its children) {}",
                    seconds(proc.waiting_for_children_s),
                    Clean(&proc.command.join(" "))
                )
            } else {
                Clean(&proc.command.join(" ")).to_string()
            }
        );
    }
}

/// Processes of one program folded into one row of the text report.
enum Fold {
    /// The first of the group: the row stands for all these (indices in `processes`).
    Head(Vec<usize>),
    /// Folded into its group's row.
    Into,
}

/// Programs run three times or more (a compiler's `g++`, `cc1plus`, `as`, `ld` per kernel under
/// torch.compile, a shell's helpers) fold into one row each: by the program's file name, and
/// for Python by its script or `-c`/`-m` argument too. Never the launched process, nor a rank.
fn folded(p: &Profile) -> HashMap<usize, Fold> {
    let root = p.processes.first().map(|q| q.pid);
    let mut by_key: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, q) in p.processes.iter().enumerate() {
        if Some(q.pid) == root || q.rank.is_some() {
            continue;
        }
        let program = q
            .command
            .first()
            .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
            .unwrap_or_default();
        let argument = match q.python {
            Some(_) => q.command.get(1).cloned().unwrap_or_default(),
            None => String::new(),
        };
        by_key.entry((program, argument)).or_default().push(i);
    }
    let mut out = HashMap::new();
    for members in by_key.into_values().filter(|m| m.len() >= 3) {
        for &i in &members[1..] {
            out.insert(i, Fold::Into);
        }
        out.insert(members[0], Fold::Head(members));
    }
    out
}

fn fold_row(out: &mut String, p: &Profile, members: &[usize], ranked: bool) {
    let procs: Vec<&crate::model::Process> = members.iter().map(|&i| &p.processes[i]).collect();
    let first = procs[0];
    let failed = procs.iter().filter(|q| q.exit.code != Some(0)).count();
    let _ = writeln!(
        out,
        "  {}{:>7} {:>7} {:>8} {:>11} {:>11} {:>9} {:>10}  ({} processes, largest peaks) {}",
        if ranked { "-           " } else { "" },
        format!("x{}", procs.len()),
        "-",
        Clean(first.python.as_deref().unwrap_or("-")),
        bytes(procs.iter().map(|q| q.peak_heap_bytes).max().unwrap_or(0)),
        bytes(procs.iter().map(|q| q.peak_rss_bytes).max().unwrap_or(0)),
        seconds(procs.iter().map(|q| q.cpu_s).sum()),
        if failed == 0 {
            "0".to_string()
        } else {
            format!("{failed} failed")
        },
        procs.len(),
        if procs.iter().all(|q| q.command == first.command) {
            Clean(&first.command.join(" ")).to_string()
        } else {
            format!(
                "{} ...",
                Clean(first.command.first().map_or("", |c| c.as_str()))
            )
        }
    );
}

fn exit(e: &Exit) -> String {
    match (e.code, e.signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(sig)) => format!("signal {sig} ({})", signal_name(sig)),
        (None, None) => "unknown".to_string(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Leak, LineStats, NativeFrame, Process, ThreadStats, SCHEMA};

    /// A profile with every section, by hand (no timings from a real run).
    fn sample() -> Profile {
        let mut p = Profile {
            schema: SCHEMA.into(),
            wall_s: 2.5,
            cpu_user_s: 2.0,
            cpu_kernel_s: 0.25,
            ..Profile::default()
        };
        p.command = vec!["python3".into(), "train.py".into()];
        p.exit.code = Some(0);
        p.memory.peak_heap_bytes = 420 << 20;
        p.memory.peak_rss_bytes = 450 << 20;
        p.memory.unaccounted_bytes = 30 << 20;
        p.memory.peak_at_s = 1.5;
        p.gpu.reason = Some("libnvidia-ml.so.1 not found".into());
        p.cpu_samples = 200;
        let line = |n: u32, src: &str, py: f64, nat: f64, sys: f64| {
            LineStats {
                file: "/work/train.py".into(),
                line: n,
                function: "main".into(),
                source: src.into(),
                ..LineStats::default()
            }
            .with_cpu(py, nat, sys)
        };
        let mut matmul = line(
            12,
            "y = x @ w  # a long comment that a narrow terminal cuts off",
            0.0,
            1.2,
            0.0,
        );
        matmul.measures.native = vec![NativeFrame {
            symbol: "dgemm_kernel_HASWELL".into(),
            library: "libopenblas.so".into(),
            cpu_s: 1.1,
        }];
        let mut leak = line(20, "cache.append(np.ones(1 << 20))", 0.1, 0.1, 0.0);
        leak.measures.alloc_bytes = 300 << 20;
        leak.measures.peak_bytes = 300 << 20;
        leak.measures.leak = Some(Leak {
            likelihood: 0.99,
            bytes_per_s: (100 << 20) as f64,
        });
        leak.footprint_bytes = (1..=20).map(|i| i << 24).collect();
        p.lines = vec![
            line(8, "for i in range(n):", 0.6, 0.0, 0.0),
            matmul,
            leak,
            line(30, "time.sleep(0.3)", 0.0, 0.0, 0.3),
        ];
        p.threads = vec![
            ThreadStats {
                pid: 10,
                tid: 10,
                python: true,
                cpu_python_s: 0.7,
                cpu_native_s: 0.8,
                cpu_system_s: 0.3,
            },
            ThreadStats {
                pid: 10,
                tid: 11,
                python: false,
                cpu_native_s: 0.5,
                ..ThreadStats::default()
            },
        ];
        p.warnings.push("example warning".into());
        p
    }

    impl LineStats {
        fn with_cpu(mut self, py: f64, nat: f64, sys: f64) -> LineStats {
            (
                self.measures.cpu_python_s,
                self.measures.cpu_native_s,
                self.measures.cpu_system_s,
            ) = (py, nat, sys);
            self
        }
    }

    /// Compare with `tests/snapshots/NAME`; `UPDATE_SNAPSHOTS=1` rewrites it.
    fn snapshot(name: &str, got: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/snapshots")
            .join(name);
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(&path, got).unwrap();
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            got,
            want,
            "{} differs (UPDATE_SNAPSHOTS=1 to accept)",
            path.display()
        );
    }

    #[test]
    fn text_report_snapshot() {
        snapshot(
            "text-report.txt",
            &render_styled(&sample(), Style::default()),
        );
    }

    #[test]
    fn narrow_terminal_cuts_source_never_numbers() {
        let out = render_styled(
            &sample(),
            Style {
                color: false,
                width: Some(60),
            },
        );
        snapshot("text-report-60.txt", &out);
        let wide = render_styled(&sample(), Style::default());
        for (narrow, full) in out.lines().zip(wide.lines()) {
            if narrow.chars().count() > 60 {
                // Too wide for its numbers alone: left whole (to wrap), never cut.
                assert!(
                    full.starts_with(narrow.trim_end()),
                    "{narrow:?} vs {full:?}"
                );
            }
        }
        assert!(
            out.contains("        12     0%    52%     0%   1.20 s"),
            "numbers whole:\n{out}"
        );
        let at_120 = render_styled(
            &sample(),
            Style {
                color: false,
                width: Some(120),
            },
        );
        assert!(at_120.lines().all(|l| l.chars().count() <= 120), "{at_120}");
        assert!(at_120.contains("cache.append"), "source kept where it fits");
    }

    #[test]
    fn colour_only_when_asked() {
        assert!(!render_styled(&sample(), Style::default()).contains('\x1b'));
        let colored = render_styled(
            &sample(),
            Style {
                color: true,
                width: None,
            },
        );
        assert!(colored.contains("\x1b[1mmlprof: python3 train.py\x1b[0m"));
        assert!(colored.contains("\x1b[33mwarning: example warning\x1b[0m"));
    }

    /// Names and source text come from the program: a `co_filename` with escape sequences
    /// must not clear the screen or retitle the terminal, nor a newline break a table.
    #[test]
    fn program_strings_reach_the_terminal_escaped() {
        let evil = "\x1b]0;pwned\x07\x1b[2J\u{9b}2J\n\x01x\x7f";
        let with = |name: &str| {
            let mut p = sample();
            p.command.push(name.into());
            p.warnings.push(name.into());
            p.gpu.reason = Some(name.into());
            for l in &mut p.lines {
                l.file = format!("/work/{name}.py");
                l.function = name.into();
                l.source = format!("x = 1  # {name}");
                for n in &mut l.measures.native {
                    n.symbol = name.into();
                    n.library = name.into();
                }
            }
            let mut f = crate::model::FunctionStats {
                file: name.into(),
                function: name.into(),
                line: 3,
                ..Default::default()
            };
            f.measures.cpu_python_s = 1.0;
            p.functions.push(f);
            p.processes = vec![
                Process {
                    command: vec![name.into()],
                    python: Some(name.into()),
                    rank: Some(name.into()),
                    ..Process::default()
                },
                Process::default(),
            ];
            p
        };
        let p = with(evil);
        for style in [
            Style::default(),
            Style {
                color: true,
                width: Some(80),
            },
        ] {
            let out = render_styled(&p, style);
            let mut ours = out.clone();
            for code in ["\x1b[0m", "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[33m"] {
                ours = ours.replace(code, "");
            }
            assert!(
                !ours.chars().any(|c| c.is_control() && c != '\n'),
                "raw control character in:\n{out}"
            );
            assert!(out.contains("\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}2J\\x0a\\x01x\\x7f"));
        }
        assert_eq!(
            render(&p).lines().count(),
            render(&with("plain")).lines().count(),
            "a newline in a name adds no line"
        );
    }

    #[test]
    fn header_names_the_essentials() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            wall_s: 2.5,
            ..Profile::default()
        };
        p.command = vec!["python3".into(), "train.py".into()];
        p.exit.signal = Some(9);
        p.memory.peak_heap_bytes = 300 << 20;
        p.memory.peak_at_s = 1.25;
        p.dropped_events = 3;
        p.processes = vec![
            Process::default(),
            Process {
                pid: 7,
                ..Process::default()
            },
        ];
        let text = render(&p);
        for needle in [
            "python3 train.py",
            "signal 9 (SIGKILL)",
            "300.0 MiB at 1.25 s",
            "dropped events  3",
            "Processes (2)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}
