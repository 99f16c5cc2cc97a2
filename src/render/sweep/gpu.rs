//! The GPU part of a sweep's documents: how the device memory held through CUDA calls grows,
//! for the tree (its GPU peak) and per line (held at the GPU peak, reserved), and which lines'
//! GPU time grows faster than linearly. Nothing is said of a sweep whose runs made no CUDA
//! call.

use super::{law, place, r2, value, Figure, SHOWN};
use crate::model::sweep::{LineGrowth, Sweep};
use crate::render::layout::{Doc, Tone};
use crate::sanitize::clean;
use crate::units::bytes;
use std::fmt::Write;

/// Whether any run's CUDA calls held device memory.
pub(super) fn any(s: &Sweep) -> bool {
    s.runs.iter().any(|r| r.gpu_peak_bytes > 0)
}

/// Lines whose GPU memory was fitted, largest first.
pub(super) fn shown(s: &Sweep) -> impl Iterator<Item = &LineGrowth> {
    s.lines
        .iter()
        .filter(|l| l.gpu_peak_exponent.is_some() || l.gpu_reserved_exponent.is_some())
        .take(SHOWN)
}

/// "GPU memory held through CUDA calls at its peak grows as N^1.00 (R² 1.00)".
pub(super) fn peak(s: &Sweep) -> Option<String> {
    s.gpu_peak.exponent?;
    Some(format!(
        "GPU memory held through CUDA calls at its peak grows as {} (R² {})",
        law(&s.param, s.gpu_peak.exponent),
        r2(s.gpu_peak.r2)
    ))
}

/// One sentence per line whose GPU memory held at the peak grows, and per line whose GPU time
/// grows faster than linearly.
pub(super) fn sentences(s: &Sweep) -> Vec<String> {
    let mut out = time_sentences(s);
    out.extend(tensor_sentences(s));
    for l in shown(s) {
        let Some(k) = l.gpu_peak_exponent else {
            continue;
        };
        if k < 0.5 || l.gpu_peak_r2.unwrap_or(0.0) < 0.8 {
            continue;
        }
        let mut line = format!(
            "{} `{}` holds GPU memory growing as {} (R² {})",
            place(l),
            clean(l.source.trim()),
            law(&s.param, Some(k)),
            r2(l.gpu_peak_r2)
        );
        if let (Some(x), Some(p)) = (s.project_value, l.projected_gpu_peak_bytes) {
            let _ = write!(
                line,
                "; at {}={} it would hold {} on the GPU",
                s.param,
                value(x),
                bytes(p)
            );
        }
        out.push(line);
    }
    out
}

/// "train.py:12 `loss = model(x)` takes GPU time growing as N^1.50 (R² 1.00)": lines whose
/// GPU time (CUPTI) grows faster than linearly, in the sweep's order of lines (the most
/// memory first), at most [`SHOWN`].
fn time_sentences(s: &Sweep) -> Vec<String> {
    s.lines
        .iter()
        .filter(|l| l.gpu_time_exponent.is_some_and(|k| k >= 1.2))
        .filter(|l| l.gpu_time_r2.unwrap_or(0.0) >= 0.8)
        .take(SHOWN)
        .map(|l| {
            format!(
                "{} `{}` takes GPU time growing as {} (R² {})",
                place(l),
                clean(l.source.trim()),
                law(&s.param, l.gpu_time_exponent),
                r2(l.gpu_time_r2)
            )
        })
        .collect()
}

/// "train.py:12 `h = model(x)` holds GPU tensors growing as N^1.00 (R² 1.00)": lines whose
/// PyTorch tensors at the GPU peak (the allocator's trace) grow, at most [`SHOWN`].
fn tensor_sentences(s: &Sweep) -> Vec<String> {
    s.lines
        .iter()
        .filter(|l| l.gpu_tensor_exponent.is_some_and(|k| k >= 0.5))
        .filter(|l| l.gpu_tensor_r2.unwrap_or(0.0) >= 0.8)
        .take(SHOWN)
        .map(|l| {
            format!(
                "{} `{}` holds GPU tensors growing as {} (R² {})",
                place(l),
                clean(l.source.trim()),
                law(&s.param, l.gpu_tensor_exponent),
                r2(l.gpu_tensor_r2)
            )
        })
        .collect()
}

/// The device memory a line held at the GPU peak, as a plot draws it.
pub(super) fn held<'a>(s: &Sweep, l: &'a LineGrowth) -> Figure<'a> {
    Figure {
        what: "GPU held",
        per_value: &l.gpu_peak_bytes,
        constant: l.gpu_peak_constant,
        exponent: l.gpu_peak_exponent,
        r2: l.gpu_peak_r2,
        details: format!("GPU reserved {}", law(&s.param, l.gpu_reserved_exponent)),
        projected: l.projected_gpu_peak_bytes,
    }
}

/// The text report's table of lines whose GPU memory was fitted (none: nothing): the figures
/// whole, the place and source cut to the width.
pub(super) fn table(doc: &mut Doc, s: &Sweep) {
    if shown(s).next().is_none() {
        return;
    }
    let projected = s
        .project_value
        .map(|x| format!("at {}={}", s.param, value(x)));
    doc.blank();
    doc.wrap(
        Tone::Plain,
        0,
        "GPU memory by line (held = device memory its CUDA allocations held at the GPU peak, \
         per value; reserved = what they reserved)",
        2,
    );
    doc.line(
        Tone::Plain,
        &format!(
            "  {:>10} {:>5} {:>10}  {:<40} {:>12}  line",
            "GPU held",
            "R²",
            "reserved",
            "held per value",
            projected.as_deref().unwrap_or("")
        ),
    );
    for l in shown(s) {
        let per: Vec<String> = l
            .gpu_peak_bytes
            .iter()
            .map(|b| b.map_or_else(|| "-".into(), bytes))
            .collect();
        let figures = format!(
            "  {:>10} {:>5} {:>10}  {:<40} {:>12}  ",
            law(&s.param, l.gpu_peak_exponent),
            r2(l.gpu_peak_r2),
            law(&s.param, l.gpu_reserved_exponent),
            per.join(" / "),
            l.projected_gpu_peak_bytes.map(bytes).unwrap_or_default(),
        );
        doc.row(
            Tone::Plain,
            &figures,
            &format!("{}  {}", place(l), clean(l.source.trim())),
        );
    }
}
