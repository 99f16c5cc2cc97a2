//! `mlprof sweep` documents: the terminal report (runs, growth laws, projections; laid out at a
//! width: `render::layout`), the JSON document (`mlprof-sweep/1`) and the HTML page (a small
//! log-log plot per top line).

use std::fmt::Write;

use tera::{Context, Tera};

use super::layout::{cells, Column, Doc, Keep, Table, Tone};
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

/// The terminal report at `width` cells (`None`: no limit): prose wrapped, the lines' table
/// laid out by `render::layout` (growth laws first, each line's place whole, its source cut).
pub fn text(s: &Sweep, width: Option<usize>) -> String {
    let mut doc = Doc::new(width);
    one(&mut doc, s);
    for m in &s.more {
        doc.blank();
        one(&mut doc, m);
    }
    doc.finish(false)
}

fn one(doc: &mut Doc, s: &Sweep) {
    let fixed: Vec<String> = s.fixed.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let values: Vec<String> = s.values.iter().map(|v| value(*v)).collect();
    let with = if fixed.is_empty() {
        String::new()
    } else {
        format!(" (with {})", fixed.join(", "))
    };
    doc.wrap(
        Tone::Plain,
        0,
        &format!("mlprof sweep: {} = {}{with}", s.param, values.join(", ")),
        2,
    );
    let gpu_column = |value: String| {
        if gpu::any(s) {
            format!(" {value:>12}")
        } else {
            String::new()
        }
    };
    doc.line(
        Tone::Plain,
        &format!(
            "  {:>10}  {:<8} {:>12} {:>12} {:>10}{}",
            s.param,
            "status",
            "peak heap",
            "peak RSS",
            "wall",
            gpu_column("GPU peak".into())
        ),
    );
    for r in &s.runs {
        doc.line(
            Tone::Plain,
            &format!(
                "  {:>10}  {:<8} {:>12} {:>12} {:>10}{}",
                value(r.value),
                r.status.as_str(),
                bytes(r.peak_heap_bytes),
                bytes(r.peak_rss_bytes),
                seconds(r.wall_s),
                gpu_column(bytes(r.gpu_peak_bytes))
            ),
        );
        if r.status != RunStatus::Ok {
            let status = match &r.reason {
                Some(why) => format!("failed: {}", clean(why)),
                None => "ok".into(),
            };
            doc.wrap(
                Tone::Plain,
                14,
                &format!("{status} (left out of the fits)"),
                14,
            );
        }
    }
    doc.blank();
    let mut peak = format!(
        "peak heap grows as {} (R² {})",
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
    doc.wrap(Tone::Plain, 2, &peak, 4);
    if let Some(gpu_peak) = gpu::peak(s) {
        doc.wrap(Tone::Plain, 2, &gpu_peak, 4);
    }
    for sentence in sentences(s) {
        doc.wrap(Tone::Plain, 2, &sentence, 4);
    }
    doc.blank();
    lines(doc, s);
}

/// The table of the top lines: growth laws, bytes held per value, the projection, the place
/// and source.
fn lines(doc: &mut Doc, s: &Sweep) {
    doc.wrap(
        Tone::Plain,
        0,
        &format!(
            "Lines (held = bytes held at the heap peak, per value; exponents of {} on log-log \
             axes)",
            s.param
        ),
        2,
    );
    let projected = s
        .project_value
        .map(|x| format!("at {}={}", s.param, value(x)));
    let rows: Vec<(Vec<String>, String, String)> = shown(s)
        .map(|l| {
            let per: Vec<String> = l
                .peak_bytes
                .iter()
                .map(|b| b.map_or_else(|| "-".into(), bytes))
                .collect();
            let cells = vec![
                law(&s.param, l.memory_exponent),
                r2(l.memory_r2),
                law(&s.param, l.alloc_exponent),
                law(&s.param, l.cpu_exponent),
                // Two spaces apart from the figures before it.
                format!(" {}", per.join(" / ")),
                l.projected_peak_bytes.map(bytes).unwrap_or_default(),
            ];
            (cells, place(l), clean(l.source.trim()).into_owned())
        })
        .collect();
    let figures: Vec<Vec<String>> = rows.iter().map(|(c, _, _)| c.clone()).collect();
    let widest = rows
        .iter()
        .map(|(_, place, source)| cells(place) + 2 + cells(source))
        .max()
        .unwrap_or(0);
    let layout = Table {
        indent: 2,
        columns: vec![
            Column::right("held", 10, Keep::Lead(0)),
            Column::right("R²", 5, Keep::Extra(1)),
            Column::right("allocated", 10, Keep::Extra(2)),
            Column::right("time", 10, Keep::Lead(1)),
            Column::left(" held per value", 41, Keep::Extra(0)),
            Column::right(projected.unwrap_or_default(), 12, Keep::Extra(3)),
        ],
        text: Some("line"),
        gap: 2,
    }
    .layout(&figures, widest, doc.width());
    doc.line(Tone::Plain, &layout.header());
    if rows.is_empty() {
        doc.wrap(
            Tone::Plain,
            2,
            &format!(
                "(none: no line held or allocated four sampling means of bytes, or took two \
                 CPU samples, in two runs that succeeded; if the runs did not differ, check \
                 that the command has {{{0}}} or that the program reads ${0})",
                s.param
            ),
            3,
        );
    }
    for (cells, place, source) in &rows {
        doc.row(
            Tone::Plain,
            &format!("{}{place}  ", layout.prefix(cells)),
            source,
        );
    }
    gpu::table(doc, s);
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
    use crate::model::sweep::RunSummary;
    use crate::render::layout::cells;

    fn long_sweep() -> Sweep {
        let line = LineGrowth {
            file: "/work/grow.py".into(),
            line: 12,
            source: format!(
                "gram = features @ features.T  # {}",
                "二乗で増える".repeat(12)
            ),
            memory_exponent: Some(2.0),
            memory_r2: Some(0.99),
            cpu_exponent: Some(1.0),
            peak_bytes: vec![Some(8 << 20), Some(32 << 20), Some(128 << 20)],
            projected_peak_bytes: Some(2 << 30),
            ..Default::default()
        };
        Sweep {
            param: "N".into(),
            values: vec![1000.0, 2000.0, 4000.0],
            runs: vec![
                RunSummary {
                    value: 1000.0,
                    ..Default::default()
                },
                RunSummary {
                    value: 20000.0,
                    status: RunStatus::Failed,
                    reason: Some(format!("exit 1: {}", "MemoryError ".repeat(12))),
                    ..Default::default()
                },
            ],
            project_value: Some(16000.0),
            projected_peak_bytes: Some(2 << 30),
            lines: vec![line],
            ..Default::default()
        }
    }

    #[test]
    fn the_report_fits_each_width_and_keeps_each_lines_place() {
        let s = long_sweep();
        assert!(text(&s, None).lines().any(|l| cells(l) > 240));
        for width in [40, 60, 80, 100, 160, 240] {
            let out = text(&s, Some(width));
            assert!(out.lines().all(|l| cells(l) <= width), "{width}:\n{out}");
            assert!(out.contains("grow.py:12  gram"), "{width}:\n{out}");
            assert!(
                out.contains("N^2.00"),
                "{width}: the held law first:\n{out}"
            );
            let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(flat.contains(&"MemoryError ".repeat(12).trim_end().to_string()));
        }
    }

    /// A sweep where no line measured enough to fit says why its table is empty.
    #[test]
    fn an_empty_table_of_lines_says_why() {
        let s = Sweep {
            param: "N".into(),
            ..Sweep::default()
        };
        let out = text(&s, None);
        let last = out.lines().last().unwrap();
        assert!(last.starts_with("  (none: no line held"), "{out}");
        assert!(
            last.contains("the command has {N} or that the program reads $N"),
            "{last}"
        );
    }
}
