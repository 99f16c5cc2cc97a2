//! The report's prose and short lists: the header (command, exit, times, peaks, GPU), what is
//! held at the heap peak, likely leaks and hints. Prose wraps under its label; lists keep their
//! figures and place whole and cut the source text.

use super::{exit, short, source_text, Doc, Tone};
use crate::model::Profile;
use crate::sanitize::clean;
use crate::units::{bytes, seconds};

/// Cells of a header label (`  peak heap       `): its values wrap under this.
const LABEL: usize = 18;

/// One header entry: its label, then its value wrapped under the value's start.
fn field(doc: &mut Doc, label: &str, value: &str) {
    doc.wrap(
        Tone::Plain,
        2,
        &format!("{label:<width$}{value}", width = LABEL - 2),
        LABEL,
    );
}

/// The profiler's own CPU beside the program's: `0.21 s (0.8% of the program's)`.
fn profiler_cpu(p: &Profile) -> String {
    let program = p.cpu_s();
    let share = match program > 0.0 {
        true => format!(
            " ({:.1}% of the program's)",
            100.0 * p.profiler.cpu_s / program
        ),
        false => String::new(),
    };
    format!("{}{share}", seconds(p.profiler.cpu_s))
}

pub(super) fn header(doc: &mut Doc, p: &Profile) {
    let cpu = p.cpu_s();
    let m = &p.memory;
    doc.wrap(
        Tone::Title,
        0,
        &format!(
            "mlprof: {}",
            clean(&crate::render::shown_command(&p.command))
        ),
        8,
    );
    if p.attached {
        field(doc, "exit", "(attached; it ran on)");
    } else {
        field(doc, "exit", &exit(&p.exit));
    }
    field(doc, "wall time", &seconds(p.wall_s));
    let unreaped = if p.cpu_unreaped_s >= 0.01 {
        format!(
            "; {} in processes reaped outside the command",
            seconds(p.cpu_unreaped_s)
        )
    } else {
        String::new()
    };
    field(
        doc,
        "CPU time",
        &format!(
            "{} (user {}, kernel {}{unreaped})",
            seconds(cpu),
            seconds(p.cpu_user_s),
            seconds(p.cpu_kernel_s),
        ),
    );
    if p.profiler.cpu_s > 0.0 {
        field(doc, "profiler CPU", &profiler_cpu(p));
    }
    if p.attached {
        field(
            doc,
            "peak heap",
            "not measured (attached to a running process)",
        );
        field(doc, "peak RSS", &bytes(m.peak_rss_bytes));
    } else {
        field(
            doc,
            "peak heap",
            &format!("{} at {}", bytes(m.peak_heap_bytes), seconds(m.peak_at_s)),
        );
        field(
            doc,
            "peak RSS",
            &format!(
                "{} ({} of it not in the counted heap or mappings)",
                bytes(m.peak_rss_bytes),
                bytes(m.unaccounted_bytes)
            ),
        );
        if m.peak_mapped_bytes > 0 {
            field(
                doc,
                "peak mapped",
                &format!(
                    "{} (anonymous mmap outside malloc, apart from the heap; counted when \
                     mapped, resident or not)",
                    bytes(m.peak_mapped_bytes)
                ),
            );
            if m.peak_counted_bytes > 0 {
                field(
                    doc,
                    "peak counted",
                    &format!(
                        "{} (heap and mapped together, mapped as far as resident)",
                        bytes(m.peak_counted_bytes)
                    ),
                );
            }
        }
    }
    field(doc, "GPU", &gpu(p));
    for note in &p.gpu.notes {
        doc.wrap(Tone::Plain, LABEL, &clean(note), LABEL);
    }
    for calls in super::super::gpu_text::summary(p) {
        field(doc, "CUDA calls", &calls);
    }
    for tensors in super::super::gpu_text::tensors_summary(p) {
        field(doc, "GPU tensors", &tensors);
    }
    field(doc, "dropped events", &p.dropped_events.to_string());
}

/// The GPU in the header's words.
fn gpu(p: &Profile) -> String {
    if p.gpu.available {
        let names: Vec<String> = p
            .gpu
            .devices
            .iter()
            .map(|d| format!("{} ({})", clean(&d.name), bytes(d.memory_total_bytes)))
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
            clean(p.gpu.reason.as_deref().unwrap_or("unknown reason"))
        )
    }
}

/// The lines holding the most memory at the peak.
pub(super) fn held(doc: &mut Doc, p: &Profile) {
    let mut top: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.measures.peak_bytes > 0)
        .collect();
    if top.is_empty() {
        return;
    }
    top.sort_by_key(|l| std::cmp::Reverse(l.measures.peak_bytes));
    doc.blank();
    doc.line(
        Tone::Title,
        &format!(
            "Held at the peak ({} at {})",
            bytes(p.memory.held_peak_bytes()),
            seconds(p.memory.held_at_s())
        ),
    );
    for l in top.iter().take(10) {
        doc.row(
            Tone::Plain,
            &format!(
                "    {:>11}  {}:{}  ",
                bytes(l.measures.peak_bytes),
                clean(short(&l.file)),
                l.line
            ),
            &source_text(&l.source),
        );
    }
}

pub(super) fn leaks(doc: &mut Doc, p: &Profile) {
    let leaking: Vec<_> = p
        .lines
        .iter()
        .filter_map(|l| Some((l, l.measures.leak?)))
        .collect();
    if leaking.is_empty() {
        return;
    }
    doc.blank();
    doc.line(Tone::Title, "Likely leaks");
    for (l, leak) in leaking {
        doc.row(
            Tone::Alert,
            &format!(
                "    {}:{}  likelihood {:.0}%, growing {}/s  ",
                clean(short(&l.file)),
                l.line,
                leak.likelihood * 100.0,
                bytes(leak.bytes_per_s.max(0.0) as u64),
            ),
            &clean(l.source.trim()),
        );
    }
}

/// Hints, whole: the most actionable text of the report wraps rather than being cut.
pub(super) fn hints(doc: &mut Doc, p: &Profile) {
    if p.hints.is_empty() {
        return;
    }
    doc.blank();
    doc.line(Tone::Title, "Hints (--no-hints to leave out)");
    for h in &p.hints {
        let place = match (&h.file, h.line, h.pid) {
            (Some(file), Some(line), _) => format!("{}:{line}", short(file)),
            (_, _, Some(pid)) => format!("pid {pid}"),
            _ => String::new(),
        };
        let source = h
            .source
            .as_deref()
            .map(|s| format!("  `{}`", clean(s)))
            .unwrap_or_default();
        doc.wrap(
            Tone::Plain,
            2,
            &format!("- {}{source}: {}", clean(&place), clean(&h.evidence)),
            4,
        );
        doc.wrap(
            Tone::Plain,
            4,
            &format!("{}; saving: {}", clean(&h.suggestion), clean(&h.saving)),
            4,
        );
    }
}
