//! The terminal report: a summary header, the process tree, and warnings.

use std::fmt::Write;

use super::units::{bytes, seconds};
use crate::model::{Exit, Profile};

/// Render the terminal report.
pub fn render(p: &Profile) -> String {
    let mut out = String::new();
    header(&mut out, p);
    if p.processes.len() > 1 {
        processes(&mut out, p);
    }
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
    let _ = writeln!(out, "  peak RSS        {}", bytes(m.peak_rss_bytes));
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
