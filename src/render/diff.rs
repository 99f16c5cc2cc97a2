//! `mlprof diff` documents: the terminal table (laid out at a width: `render::layout`), the
//! JSON document (`mlprof-diff/1`) and the HTML page (both runs side by side, changed lines
//! highlighted).

use tera::{Context, Tera};

use super::layout::{cells, cut, name_and_place, Column, Doc, Keep, Table, Tone};
use crate::error::{Error, Result};
use crate::model::diff::{Change, Diff, LineDiff, LineStatus};
use crate::model::Profile;
use crate::sanitize::clean;
use crate::units::{bytes, seconds};

const BASE: &str = include_str!("../../templates/base.html");
const PAGE: &str = include_str!("../../templates/diff.html");

/// Lines and functions the terminal table shows.
const SHOWN: usize = 25;

/// A byte change with its sign: `+64.0 MiB`, `-3.0 KiB`.
pub fn signed_bytes(d: i64) -> String {
    let sign = if d < 0 { "-" } else { "+" };
    format!("{sign}{}", bytes(d.unsigned_abs()))
}

fn signed_seconds(d: f64) -> String {
    let sign = if d < 0.0 { "-" } else { "+" };
    format!("{sign}{}", seconds(d.abs()))
}

fn percent(c: &Change) -> String {
    if c.base > 0.0 {
        format!(" ({:+.0}%)", 100.0 * c.delta / c.base)
    } else {
        String::new()
    }
}

/// A delta as the table shows it: the change, or `·` when within noise.
fn cell(l: &LineDiff, figure: &str) -> String {
    if !l.is_meaningful(figure) {
        return "·".into();
    }
    match figure {
        "peak_bytes" => signed_bytes(l.peak_bytes_delta),
        "alloc_bytes" => signed_bytes(l.alloc_bytes_delta),
        "copy_bytes" => signed_bytes(l.copy_bytes_delta),
        "mapped_peak_bytes" => signed_bytes(l.mapped_peak_bytes_delta),
        "gpu_memory_bytes" => signed_bytes(l.gpu_memory_bytes_delta),
        "gpu_peak_bytes" => signed_bytes(l.gpu_peak_bytes_delta),
        "gpu_copy_bytes" => signed_bytes(l.gpu_copy_bytes_delta),
        "gpu_kernel_s" => signed_seconds(l.gpu_kernel_s_delta),
        "gpu_tensor_peak_bytes" => signed_bytes(l.gpu_tensor_peak_bytes_delta),
        _ => signed_seconds(l.cpu_s_delta),
    }
}

/// `file.py:12 (was 10)`, the file name [`clean`]ed (it is the program's).
fn place(l: &LineDiff) -> String {
    let name = clean(l.file.rsplit('/').next().unwrap_or(&l.file));
    match (l.status, l.base_line) {
        (LineStatus::Changed | LineStatus::Edited, Some(b)) if b != l.line => {
            format!("{name}:{} (was {b})", l.line)
        }
        (LineStatus::New, _) => format!("{name}:{} (new)", l.line),
        (LineStatus::Gone, _) => format!("{name}:{} (gone)", l.line),
        _ => format!("{name}:{}", l.line),
    }
}

/// The terminal table at `width` cells (`None`: no limit): the changes first, base and new as
/// the width allows; each row's place whole, its source or name cut.
pub fn text(d: &Diff, width: Option<usize>) -> String {
    let mut doc = Doc::new(width);
    doc.line(Tone::Plain, "mlprof diff");
    for (name, run) in [("base", &d.base), ("new", &d.new)] {
        let exit = match (run.exit_code, run.exit_signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("signal {s}"),
            _ => "exit unknown".into(),
        };
        let text = format!(
            "{name:<5} {}  ({}, {exit}, {})",
            clean(&super::shown_command(&run.command)),
            clean(&run.path),
            seconds(run.wall_s)
        );
        doc.wrap(Tone::Plain, 2, &text, 8);
    }
    doc.blank();
    let m = &d.memory;
    let figures: [(&str, &Change, bool); 6] = [
        ("peak heap", &m.peak_heap_bytes, true),
        ("peak RSS", &m.peak_rss_bytes, true),
        ("peak mapped", &m.peak_mapped_bytes, true),
        ("allocated", &m.alloc_bytes, true),
        ("peak GPU memory", &m.peak_gpu_memory_bytes, true),
        ("wall time", &m.wall_s, false),
    ];
    let rows: Vec<Vec<String>> = figures
        .iter()
        .map(|&(name, c, is_bytes)| {
            let show = |v: f64| {
                if is_bytes {
                    bytes(v as u64)
                } else {
                    seconds(v)
                }
            };
            let change = if !c.meaningful {
                "within noise".to_string()
            } else if is_bytes {
                format!("{}{}", signed_bytes(c.delta as i64), percent(c))
            } else {
                format!("{}{}", signed_seconds(c.delta), percent(c))
            };
            vec![name.to_string(), show(c.base), show(c.new), change]
        })
        .collect();
    let layout = Table {
        indent: 2,
        columns: vec![
            Column::left("", 18, Keep::Always),
            Column::right("base", 12, Keep::Extra(0)),
            Column::right("new", 12, Keep::Lead(0)),
            Column::right("change", 20, Keep::Always),
        ],
        text: None,
        gap: 0,
    }
    .layout(&rows, 0, doc.width());
    doc.line(Tone::Plain, &layout.header());
    for row in &rows {
        doc.line(Tone::Plain, &layout.row(row));
    }
    section(&mut doc, "Lines", &d.lines, d.unchanged_lines, |l, room| {
        let source = clean(l.source.trim());
        let place = place(l);
        match room {
            Some(room) if cells(&place) + 2 < room => {
                format!("{place}  {}", cut(&source, room - cells(&place) - 2))
            }
            _ => format!("{place}  {source}"),
        }
    });
    section(
        &mut doc,
        "Functions",
        &d.functions,
        d.unchanged_functions,
        |l, room| {
            let name = clean(l.file.rsplit('/').next().unwrap_or(&l.file));
            let status = match l.status {
                LineStatus::New | LineStatus::Gone => format!(" ({})", l.status.as_str()),
                _ => String::new(),
            };
            let place = format!("{name}:{}", l.line);
            let function = clean(&l.function);
            match room {
                Some(room) => format!(
                    "{}{status}",
                    name_and_place(&function, &place, room.saturating_sub(cells(&status)))
                ),
                None => format!("{function} ({place}){status}"),
            }
        },
    );
    doc.finish(false)
}

/// A table of changed lines or functions; `name` gives a row's text in the room it has.
fn section(
    doc: &mut Doc,
    title: &str,
    rows: &[LineDiff],
    unchanged: usize,
    name: impl Fn(&LineDiff, Option<usize>) -> String,
) {
    doc.blank();
    doc.wrap(
        Tone::Plain,
        0,
        &format!(
            "{title} changed beyond noise: {} ({unchanged} within noise; · = within noise)",
            rows.len()
        ),
        2,
    );
    if rows.is_empty() {
        return;
    }
    // GPU columns only where a row's CUDA-call figures changed.
    let gpu = rows
        .iter()
        .any(|l| l.is_meaningful("gpu_peak_bytes") || l.is_meaningful("gpu_copy_bytes"));
    let gpu_time = rows.iter().any(|l| l.is_meaningful("gpu_kernel_s"));
    let tensors = rows
        .iter()
        .any(|l| l.is_meaningful("gpu_tensor_peak_bytes"));
    let mut figures = vec!["peak_bytes", "alloc_bytes", "copy_bytes", "cpu_s"];
    let mut columns = vec![
        Column::right("held", 12, Keep::Lead(0)),
        Column::right("allocated", 12, Keep::Lead(1)),
        Column::right("copied", 12, Keep::Extra(0)),
        Column::right("time", 10, Keep::Lead(2)),
    ];
    if gpu {
        figures.extend(["gpu_peak_bytes", "gpu_copy_bytes"]);
        columns.extend([
            Column::right("GPU held", 12, Keep::Extra(1)),
            Column::right("GPU copied", 12, Keep::Extra(2)),
        ]);
    }
    if gpu_time {
        figures.push("gpu_kernel_s");
        columns.push(Column::right("GPU time", 10, Keep::Extra(3)));
    }
    if tensors {
        figures.push("gpu_tensor_peak_bytes");
        columns.push(Column::right("GPU tensors", 12, Keep::Extra(4)));
    }
    let shown = &rows[..rows.len().min(SHOWN)];
    let cells_of: Vec<Vec<String>> = shown
        .iter()
        .map(|l| figures.iter().map(|f| cell(l, f)).collect())
        .collect();
    let widest = shown
        .iter()
        .map(|l| cells(&name(l, None)))
        .max()
        .unwrap_or(0);
    let layout = Table {
        indent: 2,
        columns,
        text: Some("where"),
        gap: 2,
    }
    .layout(&cells_of, widest, doc.width());
    doc.line(Tone::Plain, &layout.header());
    for (l, row) in shown.iter().zip(&cells_of) {
        let prefix = layout.prefix(row);
        let room = doc.width().map(|w| w.saturating_sub(cells(&prefix)));
        doc.row(Tone::Plain, &prefix, &name(l, room));
    }
    if rows.len() > SHOWN {
        doc.line(
            Tone::Plain,
            &format!("  … {} more in the JSON document", rows.len() - SHOWN),
        );
    }
}

/// The JSON document.
pub fn json(d: &Diff) -> Result<String> {
    serde_json::to_string_pretty(d)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| Error::new(format!("diff as JSON: {e}")))
}

/// A row of the page's side-by-side view of the runs' top lines.
#[derive(serde::Serialize)]
struct Side {
    place: String,
    source: String,
    peak: String,
    time: String,
    changed: bool,
}

/// Lines of each run the page shows side by side.
const SIDE_ROWS: usize = 30;

fn side(p: &Profile, d: &Diff, new: bool) -> Vec<Side> {
    let mut lines: Vec<_> = p.lines.iter().filter(|l| l.line > 0).collect();
    let weight = |m: &crate::model::Measures| {
        (m.peak_bytes as f64 / p.memory.peak_heap_bytes.max(1) as f64)
            .max((m.time_s()) / p.wall_s.max(1e-9))
    };
    lines.sort_by(|a, b| weight(&b.measures).total_cmp(&weight(&a.measures)));
    lines
        .into_iter()
        .take(SIDE_ROWS)
        .map(|l| {
            let changed = d.lines.iter().any(|c| {
                let n = if new { Some(c.line) } else { c.base_line };
                n == Some(l.line)
                    && c.file.rsplit('/').next() == l.file.rsplit('/').next()
                    && (new || c.status != LineStatus::New)
                    && (!new || c.status != LineStatus::Gone)
            });
            let m = &l.measures;
            Side {
                place: format!(
                    "{}:{}",
                    l.file.rsplit('/').next().unwrap_or(&l.file),
                    l.line
                ),
                source: l.source.trim().to_string(),
                peak: bytes(m.peak_bytes),
                time: seconds(m.time_s()),
                changed,
            }
        })
        .collect()
}

/// A changed line as the page shows it.
#[derive(serde::Serialize)]
struct Row {
    place: String,
    source: String,
    status: String,
    held: String,
    held_base: String,
    held_new: String,
    alloc: String,
    copy: String,
    time: String,
    grew: bool,
}

fn rows(v: &[LineDiff]) -> Vec<Row> {
    v.iter()
        .map(|l| Row {
            place: place(l),
            source: if l.source.is_empty() {
                l.function.clone()
            } else {
                l.source.trim().to_string()
            },
            status: l.status.as_str().to_string(),
            held: cell(l, "peak_bytes"),
            held_base: bytes(l.base.peak_bytes),
            held_new: bytes(l.new.peak_bytes),
            alloc: cell(l, "alloc_bytes"),
            copy: cell(l, "copy_bytes"),
            time: cell(l, "cpu_s"),
            grew: l.peak_bytes_delta + l.alloc_bytes_delta > 0 || l.cpu_s_delta > 0.0,
        })
        .collect()
}

/// The page: both runs' summaries and top lines side by side, the changed lines highlighted,
/// and the table of changes.
pub fn html(d: &Diff, base: &Profile, new: &Profile) -> Result<String> {
    let mut tera = Tera::default();
    tera.autoescape_on(vec![".html"]);
    tera.add_raw_templates(vec![("base.html", BASE), ("diff.html", PAGE)])
        .map_err(|e| Error::new(format!("HTML templates: {e}")))?;
    let mut ctx = Context::new();
    let m = &d.memory;
    let summary: Vec<[String; 4]> = [
        ("peak heap", &m.peak_heap_bytes, true),
        ("peak RSS", &m.peak_rss_bytes, true),
        ("allocated", &m.alloc_bytes, true),
        ("wall time", &m.wall_s, false),
    ]
    .iter()
    .map(|(name, c, is_bytes)| {
        let show = |v: f64| {
            if *is_bytes {
                bytes(v as u64)
            } else {
                seconds(v)
            }
        };
        let change = if !c.meaningful {
            "within noise".to_string()
        } else if *is_bytes {
            format!("{}{}", signed_bytes(c.delta as i64), percent(c))
        } else {
            format!("{}{}", signed_seconds(c.delta), percent(c))
        };
        [name.to_string(), show(c.base), show(c.new), change]
    })
    .collect();
    ctx.insert("base_command", &super::shown_command(&d.base.command));
    ctx.insert("new_command", &super::shown_command(&d.new.command));
    ctx.insert("base_path", &d.base.path);
    ctx.insert("new_path", &d.new.path);
    ctx.insert("summary", &summary);
    ctx.insert("lines", &rows(&d.lines));
    ctx.insert("functions", &rows(&d.functions));
    ctx.insert("unchanged_lines", &d.unchanged_lines);
    ctx.insert("base_side", &side(base, d, false));
    ctx.insert("new_side", &side(new, d, true));
    ctx.insert(
        "footer",
        &format!("mlprof {} · {}", env!("CARGO_PKG_VERSION"), d.schema),
    );
    tera.render("diff.html", &ctx)
        .map_err(|e| Error::new(format!("HTML diff: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LineStats;
    use crate::render::layout::cells;

    fn profile(held: u64) -> Profile {
        let mut p = Profile {
            wall_s: 1.0,
            ..Default::default()
        };
        p.command = vec![
            "python3".into(),
            format!("/data/{}/train.py", "x".repeat(80)),
        ];
        let mut line = LineStats {
            file: "/work/train.py".into(),
            line: 12,
            function: "main".into(),
            source: format!("y = np.array(x)  # {}", "配列".repeat(40)),
            ..Default::default()
        };
        line.measures.peak_bytes = held;
        line.measures.alloc_bytes = held;
        p.lines = vec![line];
        p.memory.peak_heap_bytes = held;
        p
    }

    #[test]
    fn the_table_fits_each_width_and_names_each_line_whole() {
        let d = crate::model::diff::compare(
            &profile(10 << 20),
            "a.json",
            &profile(900 << 20),
            "b.json",
        );
        assert!(!d.lines.is_empty(), "{d:?}");
        assert!(text(&d, None).lines().any(|l| cells(l) > 240));
        for width in [40, 60, 80, 100, 160, 240] {
            let out = text(&d, Some(width));
            assert!(out.lines().all(|l| cells(l) <= width), "{width}:\n{out}");
            assert!(out.contains("train.py:12"), "{width}:\n{out}");
            assert!(out.contains("+890.0 MiB"), "{width}: the change:\n{out}");
        }
    }
}
