//! The terminal report: a summary header, the process tree, CPU by line (with the native
//! functions under each), by function and by thread, and warnings.

use std::fmt::Write;

use super::units::{bytes, seconds};
use crate::model::{Exit, Measures, Profile};

/// Render the terminal report.
pub fn render(p: &Profile) -> String {
    let mut out = String::new();
    header(&mut out, p);
    if p.processes.len() > 1 {
        processes(&mut out, p);
    }
    lines(&mut out, p);
    functions(&mut out, p);
    threads(&mut out, p);
    memory_lines(&mut out, p);
    leaks(&mut out, p);
    for warning in &p.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

fn header(out: &mut String, p: &Profile) {
    let cpu = p.cpu_user_s + p.cpu_kernel_s;
    let m = &p.memory;
    let _ = writeln!(out, "mlprof: {}", p.command.join(" "));
    let _ = writeln!(out, "  exit            {}", exit(&p.exit));
    let _ = writeln!(out, "  wall time       {}", seconds(p.wall_s));
    let _ = writeln!(
        out,
        "  CPU time        {} (user {}, kernel {})",
        seconds(cpu),
        seconds(p.cpu_user_s),
        seconds(p.cpu_kernel_s)
    );
    let _ = writeln!(
        out,
        "  peak heap       {} at {}",
        bytes(m.peak_heap_bytes),
        seconds(m.peak_at_s)
    );
    let _ = writeln!(
        out,
        "  peak RSS        {} ({} of it not in the counted heap)",
        bytes(m.peak_rss_bytes),
        bytes(m.unaccounted_bytes)
    );
    let gpu = if p.gpu.available {
        format!("peak memory {}", bytes(p.gpu.peak_memory_bytes))
    } else {
        format!(
            "not available ({})",
            p.gpu.reason.as_deref().unwrap_or("unknown reason")
        )
    };
    let _ = writeln!(out, "  GPU             {gpu}");
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

fn lines(out: &mut String, p: &Profile) {
    let whole: f64 = p.lines.iter().map(|l| total_time(&l.measures)).sum();
    if whole <= 0.0 {
        return;
    }
    let _ = writeln!(
        out,
        "\nCPU by line ({} sampled, {} samples; shares of sampled time)",
        seconds(whole),
        p.cpu_samples
    );
    let mut file = "";
    for line in p
        .lines
        .iter()
        .filter(|l| total_time(&l.measures) >= MIN_SHARE * whole)
    {
        if line.file != file {
            file = &line.file;
            let _ = writeln!(out, "  {file}");
            let _ = writeln!(
                out,
                "    {:>6} {:>7} {:>7} {:>7} {:>9}  source",
                "line", "Python", "native", "system", "time"
            );
        }
        let m = &line.measures;
        let source: String = line.source.trim().chars().take(SOURCE_CHARS).collect();
        let _ = writeln!(
            out,
            "    {:>6} {:>7} {:>7} {:>7} {:>9}  {}",
            line.line,
            pct(m.cpu_python_s, whole),
            pct(m.cpu_native_s, whole),
            pct(m.cpu_system_s, whole),
            seconds(total_time(m)),
            if source.is_empty() {
                line.function.as_str()
            } else {
                source.as_str()
            }
        );
        for native in m
            .native
            .iter()
            .filter(|n| n.cpu_s >= MIN_SHARE * whole)
            .take(3)
        {
            let _ = writeln!(
                out,
                "    {:>6} {:>7} {:>7}   {} ({})",
                "",
                "",
                pct(native.cpu_s, whole),
                native.symbol,
                native.library
            );
        }
    }
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
            f.function,
            f.file,
            f.line
        );
    }
}

fn memory_lines(out: &mut String, p: &Profile) {
    let total: u64 = p.lines.iter().map(|l| l.measures.alloc_bytes).sum();
    if total == 0 {
        return;
    }
    let mut top: Vec<_> = p
        .lines
        .iter()
        .filter(|l| {
            let m = &l.measures;
            m.alloc_bytes as f64 >= MIN_SHARE * total as f64 || m.peak_bytes > 0 || m.copy_bytes > 0
        })
        .collect();
    top.sort_by_key(|l| std::cmp::Reverse((l.measures.peak_bytes, l.measures.alloc_bytes)));
    let _ = writeln!(
        out,
        "\nMemory by line (sampled; held = still live at the heap peak)"
    );
    let _ = writeln!(
        out,
        "    {:>11} {:>7} {:>11} {:>11}  {:<10} line",
        "allocated", "Python", "held", "copied", "footprint"
    );
    for l in top.iter().take(25) {
        let m = &l.measures;
        let python = if m.alloc_bytes > 0 {
            pct(m.alloc_python_bytes as f64, m.alloc_bytes as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "    {:>11} {:>7} {:>11} {:>11}  {:<10} {}:{}  {}",
            bytes(m.alloc_bytes),
            python,
            bytes(m.peak_bytes),
            bytes(m.copy_bytes),
            sparkline(&l.footprint_bytes),
            short(&l.file),
            l.line,
            l.source
                .trim()
                .chars()
                .take(SOURCE_CHARS)
                .collect::<String>()
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
            short(&l.file),
            l.line,
            leak.likelihood * 100.0,
            bytes(leak.bytes_per_s.max(0.0) as u64),
            l.source.trim()
        );
    }
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
}

fn processes(out: &mut String, p: &Profile) {
    let _ = writeln!(out, "\nProcesses ({})", p.processes.len());
    let _ = writeln!(
        out,
        "  {:>7} {:>7} {:>8} {:>11} {:>11} {:>9} {:>10}  command",
        "pid", "ppid", "python", "peak heap", "peak RSS", "CPU", "exit"
    );
    for proc in &p.processes {
        let _ = writeln!(
            out,
            "  {:>7} {:>7} {:>8} {:>11} {:>11} {:>9} {:>10}  {}",
            proc.pid,
            proc.ppid,
            proc.python.as_deref().unwrap_or("-"),
            bytes(proc.peak_heap_bytes),
            bytes(proc.peak_rss_bytes),
            seconds(proc.cpu_s),
            exit(&proc.exit),
            proc.command.join(" ")
        );
    }
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
    use crate::model::{Process, SCHEMA};

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
