//! The text report's account of the CUDA calls: a summary per process that made any, and under
//! each line that made some, one row of what they did (kept out of the table's columns, which
//! stay as wide as without CUDA); words only: the report lays them out (wraps them).

use std::fmt::Write;

use crate::model::profile::{
    GpuLineCalls, KernelShare, ProcessGpuCalls, ProcessKernels, ProcessTensors, TensorLine,
};
use crate::model::Profile;
use crate::sanitize::clean;
use crate::units::{bytes, seconds};

/// "copied H→D 20.0 MiB, D→H 3.0 MiB" (only the directions with bytes), or `None`.
fn copies(g: &GpuLineCalls) -> Option<String> {
    let parts: Vec<String> = [
        ("H→D", g.gpu_h2d_bytes),
        ("D→H", g.gpu_d2h_bytes),
        ("D→D", g.gpu_d2d_bytes),
    ]
    .into_iter()
    .filter(|(_, b)| *b > 0)
    .map(|(name, b)| format!("{name} {}", bytes(b)))
    .collect();
    (!parts.is_empty()).then(|| format!("copied {}", parts.join(", ")))
}

/// What a line's CUDA calls did, in one row's words, with the kernels that took most of its
/// GPU time by name (`kernels`); `None` when they did nothing.
pub fn line_row(g: &GpuLineCalls, kernels: &[KernelShare], tensors: u64) -> Option<String> {
    let mut parts = Vec::new();
    if tensors > 0 {
        parts.push(format!(
            "{} of tensors live at the GPU peak",
            bytes(tensors)
        ));
    }
    if g.gpu_reserved_bytes > 0 {
        let mut held = format!(
            "reserved {} in {} call{}, {} held at the GPU peak",
            bytes(g.gpu_reserved_bytes),
            g.gpu_reserved_calls,
            if g.gpu_reserved_calls == 1 { "" } else { "s" },
            bytes(g.gpu_peak_bytes)
        );
        if g.gpu_freed_bytes > 0 {
            let _ = write!(held, ", {} given back", bytes(g.gpu_freed_bytes));
        }
        parts.push(held);
    }
    if g.gpu_pinned_bytes > 0 {
        let mut pinned = format!("pinned {}", bytes(g.gpu_pinned_bytes));
        if g.gpu_pinned_calls > 1 {
            let _ = write!(pinned, " in {} calls", g.gpu_pinned_calls);
        }
        if g.gpu_pinned_end_bytes > 0 {
            let _ = write!(
                pinned,
                ", {} held at the end",
                bytes(g.gpu_pinned_end_bytes)
            );
        }
        parts.push(pinned);
    }
    parts.extend(kernel_time(g, kernels));
    parts.extend(traffic(g));
    // Kernel names come from the program's code: escaped, as every program string.
    (!parts.is_empty()).then(|| clean(&format!("GPU: {}", parts.join("; "))).into_owned())
}

/// "GPU time 412 ms in 3.0k kernels (gemm_small 300 ms, relu 112 ms)", or `None`.
fn kernel_time(g: &GpuLineCalls, kernels: &[KernelShare]) -> Option<String> {
    if g.gpu_kernel_s <= 0.0 {
        return None;
    }
    let mut words = format!(
        "GPU time {} in {} kernel{}",
        seconds(g.gpu_kernel_s),
        g.gpu_kernels,
        if g.gpu_kernels == 1 { "" } else { "s" }
    );
    let named: Vec<String> = kernels
        .iter()
        .take(3)
        .map(|k| format!("{} {}", short_name(&k.name), seconds(k.gpu_s)))
        .collect();
    if !named.is_empty() {
        let _ = write!(words, " ({})", named.join(", "));
    }
    Some(words)
}

/// A kernel's name as a reader takes it in: C++ template arguments and parameters dropped,
/// at most 60 characters (the JSON keeps it whole).
fn short_name(name: &str) -> String {
    let base = name.split(['<', '(']).next().unwrap_or(name);
    let base = if base.is_empty() { name } else { base };
    if base.chars().count() > 60 {
        let cut: String = base.chars().take(59).collect();
        format!("{cut}…")
    } else {
        base.to_string()
    }
}

/// The kernels a process ran, in words: its GPU time, its top kernels, and why it is
/// missing or partial.
fn kernels_words(k: &ProcessKernels) -> Option<String> {
    if k.state != "on" && k.kernels == 0 {
        return Some(format!("no GPU time: {}", k.note));
    }
    let mut words = format!(
        "GPU time {} in {} kernels",
        seconds(k.gpu_kernel_s),
        k.kernels
    );
    let named: Vec<String> = k
        .top
        .iter()
        .take(3)
        .map(|t| format!("{} {}", short_name(&t.name), seconds(t.gpu_s)))
        .collect();
    if !named.is_empty() {
        let _ = write!(words, " ({})", named.join(", "));
    }
    if k.unattributed_s > 0.0 {
        let _ = write!(
            words,
            ", {} of it in kernels no sampled launch ran (on no line)",
            seconds(k.unattributed_s)
        );
    }
    if !k.note.is_empty() {
        let _ = write!(words, "; {}", k.note);
    }
    Some(words)
}

/// The copies, the wait and the launches, in words (those there are).
fn traffic(g: &GpuLineCalls) -> Vec<String> {
    let mut parts: Vec<String> = copies(g).into_iter().collect();
    if g.gpu_wait_s > 0.0 {
        parts.push(format!("waited {} for the GPU", seconds(g.gpu_wait_s)));
    }
    if g.gpu_launches > 0 {
        let plural = if g.gpu_launches == 1 { "" } else { "es" };
        parts.push(format!("{} kernel launch{plural}", g.gpu_launches));
    }
    parts
}

/// One summary per process whose allocator was traced (`pid 12: device 0: 32.0 MiB of
/// tensors at the peak ...`), for the header.
pub fn tensors_summary(p: &Profile) -> Vec<String> {
    p.processes
        .iter()
        .filter_map(|process| {
            let t = process.gpu_tensors.as_ref()?;
            // Tensors' file names are the program's: escaped.
            Some(clean(&format!("pid {}: {}", process.pid, tensors_words(t))).into_owned())
        })
        .collect()
}

fn tensors_words(t: &ProcessTensors) -> String {
    let mut parts: Vec<String> = t
        .devices
        .iter()
        .map(|d| {
            let at = d
                .at_s
                .map_or_else(String::new, |t| format!(" at {}", seconds(t)));
            let mut words = format!(
                "device {}: {} of tensors at the peak{at} ({} reserved, {} cache slack)",
                d.device,
                bytes(d.peak_allocated_bytes),
                bytes(d.reserved_at_peak_bytes),
                bytes(d.cache_slack_bytes)
            );
            if !d.top.is_empty() {
                let _ = write!(words, ", held by {}", held_by(&d.top));
            }
            if d.before_trace_bytes > 0 {
                let _ = write!(
                    words,
                    ", {} allocated before the {} began",
                    bytes(d.before_trace_bytes),
                    if t.cut_to_region { "region" } else { "trace" }
                );
            }
            if let Some(oom) = &d.oom {
                let at = oom
                    .at
                    .as_ref()
                    .map_or_else(String::new, |l| format!(" at {}", place(l)));
                let _ = write!(
                    words,
                    "; out of memory{at} asking {} with {} free and {} of tensors held",
                    bytes(oom.requested_bytes),
                    bytes(oom.device_free_bytes),
                    bytes(oom.allocated_bytes)
                );
                if !oom.top.is_empty() {
                    let _ = write!(words, " by {}", held_by(&oom.top));
                }
            }
            words
        })
        .collect();
    if !t.note.is_empty() {
        parts.push(t.note.clone());
    }
    parts.join("; ")
}

/// "train.py:21 16.0 MiB, train.py:16 8.0 MiB" (the first 3 lines).
fn held_by(lines: &[TensorLine]) -> String {
    lines
        .iter()
        .take(3)
        .map(|l| format!("{} {}", place(l), bytes(l.bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn place(l: &TensorLine) -> String {
    let file = l.file.rsplit('/').next().unwrap_or(&l.file);
    format!("{file}:{}", l.line)
}

/// One summary per process with CUDA calls (`pid 12: device 0 peak ...`), for the header.
pub fn summary(p: &Profile) -> Vec<String> {
    p.processes
        .iter()
        .filter_map(|process| {
            let calls = process.gpu_calls.as_ref()?;
            // Kernel names are the program's: escaped.
            Some(clean(&format!("pid {}: {}", process.pid, process_words(calls))).into_owned())
        })
        .collect()
}

fn process_words(calls: &ProcessGpuCalls) -> String {
    let mut parts: Vec<String> = calls
        .devices
        .iter()
        .map(|d| {
            let device = d
                .device
                .map_or("device ?".to_string(), |n| format!("device {n}"));
            format!(
                "{device} peak {} at {} ({} held at the end)",
                bytes(d.peak_bytes),
                seconds(d.at_s),
                bytes(d.end_bytes)
            )
        })
        .collect();
    let t = &calls.totals;
    if calls.pinned_peak_bytes > 0 {
        parts.push(format!("pinned peak {}", bytes(calls.pinned_peak_bytes)));
    }
    parts.extend(calls.kernels.as_ref().and_then(kernels_words));
    parts.extend(traffic(t));
    if let Some(n) = &calls.nvml {
        parts.push(format!(
            "NVML peak {} at {}: {} held through these calls, {} not seen (CUDA context, \
             libraries' workspaces, memory not reserved through the runtime)",
            bytes(n.peak_bytes),
            seconds(n.at_s),
            bytes(n.through_calls_bytes),
            bytes(n.not_seen_bytes)
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel name or tensor file with terminal escapes reaches the report escaped, in every
    /// GPU row and summary.
    #[test]
    fn program_strings_in_gpu_rows_are_escaped() {
        let evil = "k\x1b]0;pwned\x07\x1b[2J<float>";
        let calls = GpuLineCalls {
            gpu_kernel_s: 0.5,
            gpu_kernels: 3,
            ..GpuLineCalls::default()
        };
        let kernels = [KernelShare {
            name: evil.to_string(),
            gpu_s: 0.5,
            ..KernelShare::default()
        }];
        let row = line_row(&calls, &kernels, 0).unwrap();
        assert!(!row.contains('\x1b') && !row.contains('\x07'), "{row:?}");
        assert!(row.contains("pwned"), "the name is shown, escaped: {row:?}");
    }

    #[test]
    fn a_line_row_names_only_what_its_calls_did() {
        assert_eq!(line_row(&GpuLineCalls::default(), &[], 0), None);
        let g = GpuLineCalls {
            gpu_reserved_bytes: 3 << 20,
            gpu_reserved_calls: 1,
            gpu_peak_bytes: 3 << 20,
            gpu_d2h_bytes: 1 << 20,
            gpu_wait_s: 0.25,
            ..GpuLineCalls::default()
        };
        let row = line_row(&g, &[], 0).unwrap();
        assert!(
            row.starts_with("GPU: reserved 3.0 MiB in 1 call, 3.0 MiB held"),
            "{row}"
        );
        assert!(
            row.contains("copied D→H 1.0 MiB") && !row.contains("H→D"),
            "{row}"
        );
        assert!(row.contains("waited") && !row.contains("launches"), "{row}");
        let pinned = GpuLineCalls {
            gpu_pinned_bytes: 80 << 20,
            gpu_pinned_calls: 20,
            gpu_pinned_end_bytes: 40 << 20,
            ..GpuLineCalls::default()
        };
        assert_eq!(
            line_row(&pinned, &[], 0).unwrap(),
            "GPU: pinned 80.0 MiB in 20 calls, 40.0 MiB held at the end"
        );
    }
}
