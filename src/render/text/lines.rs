//! The report's table by line: one per file, a row per line with time by kind (shares of the
//! sampled time), memory (allocated, Python share, held at the peak, mapped, copied (total),
//! footprint, leak mark), GPU figures, then the source; under a row, its CUDA calls, its wait
//! for worker processes, its element-wise copies and its top native functions (a pool's
//! spinning and barrier waiting folded into one of them per runtime). The columns are chosen by the width
//! (`layout::Table`): line number, the time shares and time, and the start of the source come
//! first; figures the width cannot hold, and empty ones first, are left out.

use super::{clean, pct, source_text, total_time, Doc, Tone, MIN_SHARE};
use crate::model::{LineStats, Profile};
use crate::render::layout::{cells, cut_start, name_and_place, pad, Column, Keep, Layout, Table};
use crate::units::{bytes, seconds};

// Column indices (see `table`).
const LINE: usize = 0;
const NATIVE: usize = 2;

/// Whether a line shows in the per-line table: enough time, or enough memory activity.
fn shown(l: &LineStats, whole_s: f64, whole_bytes: u64) -> bool {
    let m = &l.measures;
    total_time(m) >= MIN_SHARE * whole_s
        || (whole_bytes > 0 && m.alloc_bytes as f64 >= MIN_SHARE * whole_bytes as f64)
        || m.peak_bytes > 0
        || m.copy_bytes > 0
        || m.mapped_peak_bytes > 0
        || !m.gpu_calls.is_empty()
        || m.gpu_tensor_peak_bytes > 0
}

/// Whether the line tables get GPU columns: only when GPU figures were attributed to lines.
fn gpu_columns(p: &Profile) -> bool {
    p.gpu.available
        && p.lines
            .iter()
            .any(|l| l.measures.gpu_util_pct > 0.0 || l.measures.gpu_memory_bytes > 0)
}

/// The columns, in the order shown, with how long each stays as the width shrinks: the line
/// number always; the time shares and time (the leading figures); then held, allocated, the
/// leak mark, GPU figures, the Python share, copies, mapped bytes and the footprint.
fn table(rows: &[&LineStats], mapped: bool, gpu: bool, kernel: bool) -> Table {
    let none = |f: fn(&LineStats) -> bool| !rows.iter().any(|l| f(l));
    let mut columns = vec![
        Column::right("line", 6, Keep::Always),
        Column::right("Python", 6, Keep::Lead(1)),
        Column::right("native", 6, Keep::Lead(2)),
    ];
    // Where a narrow report has room for one more figure, what a line holds comes first, then
    // the kernel's time on its page faults.
    if kernel {
        columns.push(Column::right("kernel", 6, Keep::Extra(1)));
    }
    columns.extend([
        Column::right("waiting", 7, Keep::Lead(3)),
        Column::right("time", 8, Keep::Lead(0)),
    ]);
    let allocated = columns.len();
    columns.extend([
        Column::right("allocated", 10, Keep::Extra(2)).empty(none(|l| l.measures.alloc_bytes > 0)),
        Column::right("Py", 4, Keep::Extra(6))
            .needs(allocated)
            .empty(none(|l| l.measures.alloc_bytes > 0)),
        Column::right("held", 10, Keep::Extra(0)).empty(none(|l| l.measures.peak_bytes > 0)),
    ]);
    if mapped {
        columns.push(Column::right("mapped", 10, Keep::Extra(8)));
    }
    columns.extend([
        Column::right("copied", 10, Keep::Extra(7)).empty(none(|l| {
            l.measures.copy_bytes > 0 || l.measures.copy_loop_s > 0.0
        })),
        Column::left("footprint", 10, Keep::Extra(9))
            .empty(none(|l| l.footprint_bytes.iter().any(|&b| b > 0))),
        Column::left("leak", 4, Keep::Extra(3)).empty(none(|l| l.measures.leak.is_some())),
    ]);
    if gpu {
        columns.extend([
            Column::right("GPU%", 5, Keep::Extra(4)),
            Column::right("GPU mem", 10, Keep::Extra(5)),
        ]);
    }
    Table {
        indent: 4,
        columns,
        text: Some("source"),
        gap: 1,
    }
}

/// Whether the tables show a `kernel` column: where the kernel's time on page faults is at
/// least half a percent of the time somewhere.
pub(super) fn kernel_column<'a>(
    rows: impl Iterator<Item = &'a crate::model::Measures>,
    whole: f64,
) -> bool {
    rows.into_iter().any(|m| m.kernel_s > 0.005 * whole)
}

/// A row's cells, in [`table`]'s order.
fn cells_of(l: &LineStats, whole: f64, mapped: bool, gpu: bool, kernel: bool) -> Vec<String> {
    let m = &l.measures;
    let python_share = if m.alloc_bytes > 0 {
        pct(m.alloc_python_bytes as f64, m.alloc_bytes as f64)
    } else {
        "-".into()
    };
    let mut row = vec![
        l.line.to_string(),
        pct(m.cpu_python_s, whole),
        pct(m.cpu_native_s, whole),
    ];
    if kernel {
        row.push(pct(m.kernel_s, whole));
    }
    row.extend([
        pct(m.waiting_s, whole),
        seconds(total_time(m)),
        bytes(m.alloc_bytes),
        python_share,
        bytes(m.peak_bytes),
    ]);
    if mapped {
        row.push(bytes(m.mapped_peak_bytes));
    }
    row.extend([
        copied(m, whole),
        sparkline(&l.footprint_bytes),
        if m.leak.is_some() { "leak" } else { "" }.to_string(),
    ]);
    if gpu {
        row.extend([format!("{:.0}%", m.gpu_util_pct), bytes(m.gpu_memory_bytes)]);
    }
    row
}

/// The copies cell: bytes through `memcpy`, with [`ELEMENT_WISE`] where the line also copied
/// element by element (numpy's strided and cast loops), whose bytes are not counted.
fn copied(m: &crate::model::Measures, whole: f64) -> String {
    let counted = bytes(m.copy_bytes);
    if element_wise(m, whole) {
        format!("{counted}{ELEMENT_WISE}")
    } else {
        counted
    }
}

/// The mark of a line that copies element by element beside its counted bytes.
const ELEMENT_WISE: &str = "+";

/// Whether a line's element-wise copies are worth saying: a visible share of the time.
fn element_wise(m: &crate::model::Measures, whole: f64) -> bool {
    m.copy_loop_s > 0.0 && m.copy_loop_s >= MIN_SHARE * whole
}

/// The row's text: its source, else its function's name.
fn text_of(l: &LineStats) -> String {
    let source = source_text(&l.source);
    if source.is_empty() {
        clean(&l.function).into_owned()
    } else {
        source
    }
}

/// One table per file, a row per line (see the module documentation).
pub(super) fn lines(doc: &mut Doc, p: &Profile) {
    let whole: f64 = p.lines.iter().map(|l| total_time(&l.measures)).sum();
    let whole_bytes: u64 = p.lines.iter().map(|l| l.measures.alloc_bytes).sum();
    let mapped = p.lines.iter().any(|l| l.measures.mapped_peak_bytes > 0);
    if whole <= 0.0 && whole_bytes == 0 && !mapped {
        return;
    }
    let kernel = kernel_column(p.lines.iter().map(|l| &l.measures), whole);
    doc.blank();
    doc.wrap(
        Tone::Title,
        0,
        &format!(
            "By line ({} sampled in {} samples; time as shares of it; Python, native: on CPU, \
             system calls included;{} waiting: off CPU (sleep, I/O, locks, the GIL, workers); \
             memory sampled, held = live at the peak (mapped too where it sets it){}{})",
            seconds(whole),
            p.cpu_samples,
            if kernel {
                " kernel: page faults (fresh memory touched);"
            } else {
                ""
            },
            if mapped {
                ", mapped = anonymous mmap held at its own peak"
            } else {
                ""
            },
            if p.lines.iter().any(|l| element_wise(&l.measures, whole)) {
                ", copied + = also copies element by element, bytes not counted"
            } else {
                ""
            }
        ),
        2,
    );
    let gpu = gpu_columns(p);
    let rows: Vec<&LineStats> = p
        .lines
        .iter()
        .filter(|l| shown(l, whole, whole_bytes))
        .collect();
    let figures: Vec<Vec<String>> = rows
        .iter()
        .map(|l| cells_of(l, whole, mapped, gpu, kernel))
        .collect();
    let texts: Vec<String> = rows.iter().map(|l| text_of(l)).collect();
    let widest = texts.iter().map(|t| cells(t)).max().unwrap_or(0);
    let layout = table(&rows, mapped, gpu, kernel).layout(&figures, widest, doc.width());
    let header = layout.header();
    let mut file = "";
    for ((line, row), text) in rows.iter().zip(&figures).zip(&texts) {
        if line.file != file {
            file = &line.file;
            let name = clean(file);
            match doc.width() {
                Some(w) => doc.line(Tone::Plain, &format!("  {}", cut_start(&name, w - 2))),
                None => doc.line(Tone::Plain, &format!("  {name}")),
            }
            doc.line(Tone::Plain, &header);
        }
        doc.row(Tone::Plain, &layout.prefix(row), text);
        under(doc, &layout, line, whole);
    }
}

/// The rows under a line: its CUDA calls (wrapped), its wait for worker processes and its top
/// native functions (`symbol (library)`, the symbol cut first), each share under the native
/// column (or beside the line number when that is not shown).
fn under(doc: &mut Doc, layout: &Layout, line: &LineStats, whole: f64) {
    let m = &line.measures;
    let at = layout
        .end_of(NATIVE)
        .or_else(|| layout.end_of(LINE))
        .unwrap_or(0);
    let lead = |share: &str| format!("{}   ", pad(share, at, true));
    if let Some(row) =
        super::super::gpu_text::line_row(&m.gpu_calls, &m.gpu_kernel_names, m.gpu_tensor_peak_bytes)
    {
        doc.wrap(Tone::Plain, at + 3, &row, at + 5);
    }
    if m.waiting_for_workers_s >= MIN_SHARE * whole {
        doc.row(
            Tone::Dim,
            &lead(&pct(m.waiting_for_workers_s, whole)),
            &format!(
                "waiting for worker processes ({})",
                seconds(m.waiting_for_workers_s)
            ),
        );
    }
    if element_wise(m, whole) {
        doc.row(
            Tone::Dim,
            &lead(&pct(m.copy_loop_s, whole)),
            &format!(
                "copying element by element in numpy's strided and cast loops ({}; bytes not \
                 counted in copied)",
                seconds(m.copy_loop_s)
            ),
        );
    }
    for native in m
        .native
        .iter()
        .filter(|n| n.cpu_s >= MIN_SHARE * whole)
        .take(3)
    {
        let keep = lead(&pct(native.cpu_s, whole));
        let (symbol, library) = (clean(&native.symbol), clean(&native.library));
        let text = match doc.width() {
            Some(w) => name_and_place(&symbol, &library, w.saturating_sub(cells(&keep))),
            None => format!("{symbol} ({library})"),
        };
        doc.row(Tone::Dim, &keep, &text);
    }
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
