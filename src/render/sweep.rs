//! `mlprof sweep` documents: the terminal report (runs, growth laws, projections), the JSON
//! document (`mlprof-sweep/1`) and the HTML page (a small log-log plot per top line).

use std::fmt::Write;

use tera::{Context, Tera};

use crate::error::{Error, Result};
use crate::model::sweep::{LineGrowth, RunStatus, Sweep};
use crate::sanitize::clean;
use crate::units::{bytes, seconds};

mod gpu;

const BASE: &str = include_str!("../../templates/base.html");
const PAGE: &str = include_str!("../../templates/sweep.html");

/// Lines the terminal report and the page show per parameter.
const SHOWN: usize = 15;

/// A parameter's value as given: `4000`, `0.5`.
fn value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn law(param: &str, exponent: Option<f64>) -> String {
    exponent.map_or_else(|| "-".into(), |k| format!("{param}^{k:.2}"))
}

fn r2(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.2}"))
}

/// `file.py:12`, the file name [`clean`]ed (it is the program's).
fn place(l: &LineGrowth) -> String {
    format!(
        "{}:{}",
        clean(l.file.rsplit('/').next().unwrap_or(&l.file)),
        l.line
    )
}

/// Lines worth showing: those that hold or take something measurable.
fn shown(s: &Sweep) -> impl Iterator<Item = &LineGrowth> {
    s.lines
        .iter()
        .filter(|l| l.memory_exponent.is_some() || l.cpu_exponent.is_some())
        .take(SHOWN)
}

/// One sentence per top line that grows: "t.py:12 grows as N^2.00; at N=8000 it would hold
/// 488.3 MiB".
pub fn sentences(s: &Sweep) -> Vec<String> {
    let mut out = Vec::new();
    for l in shown(s) {
        let Some(k) = l.memory_exponent else {
            continue;
        };
        if k < 0.5 || l.memory_r2.unwrap_or(0.0) < 0.8 {
            continue;
        }
        let mut line = format!(
            "{} `{}` grows as {} (R² {})",
            place(l),
            clean(l.source.trim()),
            law(&s.param, Some(k)),
            r2(l.memory_r2)
        );
        if let (Some(x), Some(p)) = (s.project_value, l.projected_peak_bytes) {
            let _ = write!(
                line,
                "; at {}={} it would hold {}",
                s.param,
                value(x),
                bytes(p)
            );
        }
        out.push(line);
    }
    out.extend(gpu::sentences(s));
    out
}

/// The terminal report.
pub fn text(s: &Sweep) -> String {
    let mut out = String::new();
    one(&mut out, s);
    for m in &s.more {
        let _ = writeln!(out);
        one(&mut out, m);
    }
    out
}

fn one(out: &mut String, s: &Sweep) {
    let fixed: Vec<String> = s.fixed.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        out,
        "mlprof sweep: {} = {}{}",
        s.param,
        s.values
            .iter()
            .map(|v| value(*v))
            .collect::<Vec<_>>()
            .join(", "),
        if fixed.is_empty() {
            String::new()
        } else {
            format!(" (with {})", fixed.join(", "))
        }
    );
    let gpu_column = |value: String| {
        if gpu::any(s) {
            format!(" {value:>12}")
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        out,
        "  {:>10}  {:<8} {:>12} {:>12} {:>10}{}",
        s.param,
        "status",
        "peak heap",
        "peak RSS",
        "wall",
        gpu_column("GPU peak".into())
    );
    for r in &s.runs {
        let status = match &r.reason {
            Some(why) => format!("failed: {}", clean(why)),
            None => "ok".into(),
        };
        let _ = writeln!(
            out,
            "  {:>10}  {:<8} {:>12} {:>12} {:>10}{}",
            value(r.value),
            r.status.as_str(),
            bytes(r.peak_heap_bytes),
            bytes(r.peak_rss_bytes),
            seconds(r.wall_s),
            gpu_column(bytes(r.gpu_peak_bytes))
        );
        if r.status != RunStatus::Ok {
            let _ = writeln!(out, "              {status} (left out of the fits)");
        }
    }
    let _ = writeln!(out);
    let mut peak = format!(
        "  peak heap grows as {} (R² {})",
        law(&s.param, s.peak.exponent),
        r2(s.peak.r2)
    );
    if let (Some(x), Some(p)) = (s.project_value, s.projected_peak_bytes) {
        let _ = write!(
            peak,
            "; at {}={} the peak would be {} (the largest run's, plus each fitted line's growth)",
            s.param,
            value(x),
            bytes(p)
        );
    }
    let _ = writeln!(out, "{peak}");
    if let Some(gpu_peak) = gpu::peak(s) {
        let _ = writeln!(out, "  {gpu_peak}");
    }
    for sentence in sentences(s) {
        let _ = writeln!(out, "  {sentence}");
    }
    let _ = writeln!(out);
    let projected = s
        .project_value
        .map(|x| format!("at {}={}", s.param, value(x)));
    let _ = writeln!(
        out,
        "Lines (held = bytes held at the heap peak, per value; exponents of {} on log-log axes)",
        s.param
    );
    let _ = writeln!(
        out,
        "  {:>10} {:>5} {:>10} {:>10}  {:<40} {:>12}  line",
        "held",
        "R²",
        "allocated",
        "time",
        "held per value",
        projected.as_deref().unwrap_or("")
    );
    if shown(s).next().is_none() {
        let _ = writeln!(
            out,
            "  (none: no line held or allocated four sampling means of bytes, or took two CPU \
             samples, in two runs that succeeded; if the runs did not differ, check that the \
             command has {{{0}}} or that the program reads ${0})",
            s.param
        );
    }
    for l in shown(s) {
        let per: Vec<String> = l
            .peak_bytes
            .iter()
            .map(|b| b.map_or_else(|| "-".into(), bytes))
            .collect();
        let _ = writeln!(
            out,
            "  {:>10} {:>5} {:>10} {:>10}  {:<40} {:>12}  {}  {}",
            law(&s.param, l.memory_exponent),
            r2(l.memory_r2),
            law(&s.param, l.alloc_exponent),
            law(&s.param, l.cpu_exponent),
            per.join(" / "),
            l.projected_peak_bytes.map(bytes).unwrap_or_default(),
            place(l),
            clean(l.source.trim())
        );
    }
    gpu::table(out, s);
}

/// The JSON document.
pub fn json(s: &Sweep) -> Result<String> {
    serde_json::to_string_pretty(s)
        .map(|mut t| {
            t.push('\n');
            t
        })
        .map_err(|e| Error::new(format!("sweep as JSON: {e}")))
}

/// A line as the page shows it, with its plot's points.
#[derive(serde::Serialize)]
struct Plot {
    place: String,
    source: String,
    /// "held ∝ N^2.00", or "GPU held ∝ N^2.00".
    law: String,
    r2: String,
    /// The line's other growth laws, in words.
    details: String,
    projected: String,
    /// SVG polyline points of the measured bytes and of the fit, on log-log axes.
    measured: Vec<(f64, f64)>,
    fitted: Vec<(f64, f64)>,
    labels: Vec<String>,
    /// (x position, parameter value) under the plot.
    ticks: Vec<(f64, String)>,
}

const W: f64 = 220.0;
const H: f64 = 120.0;
const PAD: f64 = 14.0;
/// The steepest growth (exponent) a plot's height holds.
const SLOPES: f64 = 2.5;

/// What a plot draws: a line's bytes per value and their fit.
pub(super) struct Figure<'a> {
    /// "held", "GPU held".
    pub what: &'static str,
    pub per_value: &'a [Option<u64>],
    pub constant: Option<f64>,
    pub exponent: Option<f64>,
    pub r2: Option<f64>,
    pub details: String,
    pub projected: Option<u64>,
}

/// The host memory a line held at the heap peak, as a plot draws it.
fn held<'a>(s: &Sweep, l: &'a LineGrowth) -> Figure<'a> {
    Figure {
        what: "held",
        per_value: &l.peak_bytes,
        constant: l.memory_constant,
        exponent: l.memory_exponent,
        r2: l.memory_r2,
        details: format!(
            "allocated {} · time {}",
            law(&s.param, l.alloc_exponent),
            law(&s.param, l.cpu_exponent)
        ),
        projected: l.projected_peak_bytes,
    }
}

fn plot(s: &Sweep, l: &LineGrowth, f: &Figure) -> Plot {
    let pts: Vec<(f64, f64)> = s
        .values
        .iter()
        .zip(f.per_value)
        .filter_map(|(x, y)| Some((*x, (*y)? as f64)))
        .filter(|(_, y)| *y > 0.0)
        .collect();
    let mut xs: Vec<f64> = s.values.clone();
    if let Some(x) = s.project_value {
        xs.push(x);
    }
    let fit = |x: f64| Some(f.constant? * x.powf(f.exponent?));
    let mut ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
    ys.extend(xs.iter().filter_map(|&x| fit(x)));
    let (x0, x1) = range(xs.iter().copied());
    let (y0, _) = range(ys.iter().copied());
    // One scale for every plot: the height spans SLOPES times the decades of the width, so a
    // quadratic line looks twice as steep as a linear one (each plot starts at its lowest
    // point; steeper than that leaves the top).
    let decades = (x1 - x0).max(1e-9);
    let px = |x: f64| PAD + (W - 2.0 * PAD) * (x.ln() - x0) / decades;
    let py = |y: f64| {
        (H - PAD - (H - 2.0 * PAD) * (y.ln() - y0) / (SLOPES * decades)).clamp(PAD / 2.0, H)
    };
    let measured = pts.iter().map(|&(x, y)| (px(x), py(y))).collect();
    let mut fx: Vec<f64> = xs.clone();
    fx.sort_by(f64::total_cmp);
    let fitted = fx
        .iter()
        .filter_map(|&x| Some((px(x), py(fit(x)?))))
        .collect();
    Plot {
        place: place(l),
        source: l.source.trim().to_string(),
        law: format!("{} ∝ {}", f.what, law(&s.param, f.exponent)),
        r2: r2(f.r2),
        details: f.details.clone(),
        projected: f.projected.map(bytes).unwrap_or_default(),
        measured,
        fitted,
        labels: pts.iter().map(|p| bytes(p.1 as u64)).collect(),
        ticks: xs.iter().map(|&x| (px(x), value(x))).collect(),
    }
}

/// The range of the logarithms of positive values.
fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let logs: Vec<f64> = v.filter(|x| *x > 0.0).map(f64::ln).collect();
    let lo = logs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}

/// A parameter's section of the page.
#[derive(serde::Serialize)]
struct Section {
    param: String,
    values: String,
    fixed: String,
    /// Per run: value, status, peak heap, peak RSS, wall, and GPU peak when there is one.
    runs: Vec<Vec<String>>,
    /// Whether the runs made CUDA calls (a GPU peak column).
    gpu: bool,
    peak: String,
    /// The GPU peak's growth in words (empty without CUDA calls).
    gpu_peak: String,
    sentences: Vec<String>,
    plots: Vec<Plot>,
}

fn section(s: &Sweep) -> Section {
    Section {
        param: s.param.clone(),
        values: s
            .values
            .iter()
            .map(|v| value(*v))
            .collect::<Vec<_>>()
            .join(", "),
        fixed: s
            .fixed
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        runs: s
            .runs
            .iter()
            .map(|r| {
                let mut row = vec![
                    value(r.value),
                    r.reason.clone().unwrap_or_else(|| "ok".into()),
                    bytes(r.peak_heap_bytes),
                    bytes(r.peak_rss_bytes),
                    seconds(r.wall_s),
                ];
                if gpu::any(s) {
                    row.push(bytes(r.gpu_peak_bytes));
                }
                row
            })
            .collect(),
        gpu: gpu::any(s),
        peak: match (s.project_value, s.projected_peak_bytes) {
            (Some(x), Some(p)) => format!(
                "peak heap grows as {} (R² {}); at {}={} it would be {}",
                law(&s.param, s.peak.exponent),
                r2(s.peak.r2),
                s.param,
                value(x),
                bytes(p)
            ),
            _ => format!(
                "peak heap grows as {} (R² {})",
                law(&s.param, s.peak.exponent),
                r2(s.peak.r2)
            ),
        },
        gpu_peak: gpu::peak(s).unwrap_or_default(),
        sentences: sentences(s),
        plots: shown(s)
            .filter(|l| l.memory_exponent.is_some())
            .map(|l| plot(s, l, &held(s, l)))
            .chain(
                gpu::shown(s)
                    .filter(|l| l.gpu_peak_exponent.is_some())
                    .map(|l| plot(s, l, &gpu::held(s, l))),
            )
            .collect(),
    }
}

/// The page.
pub fn html(s: &Sweep) -> Result<String> {
    let mut tera = Tera::default();
    tera.autoescape_on(vec![".html"]);
    tera.add_raw_templates(vec![("base.html", BASE), ("sweep.html", PAGE)])
        .map_err(|e| Error::new(format!("HTML templates: {e}")))?;
    let mut ctx = Context::new();
    let mut sections = vec![section(s)];
    sections.extend(s.more.iter().map(section));
    ctx.insert("sections", &sections);
    ctx.insert("w", &W);
    ctx.insert("h", &H);
    ctx.insert(
        "footer",
        &format!("mlprof {} · {}", env!("CARGO_PKG_VERSION"), s.schema),
    );
    tera.render("sweep.html", &ctx)
        .map_err(|e| Error::new(format!("HTML sweep: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep where no line measured enough to fit says why its table is empty.
    #[test]
    fn an_empty_table_of_lines_says_why() {
        let s = Sweep {
            param: "N".into(),
            ..Sweep::default()
        };
        let out = text(&s);
        let last = out.lines().last().unwrap();
        assert!(last.starts_with("  (none: no line held"), "{out}");
        assert!(
            last.contains("the command has {N} or that the program reads $N"),
            "{last}"
        );
    }
}
