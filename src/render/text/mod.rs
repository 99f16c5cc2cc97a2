//! The terminal report: a summary header, the process tree, CPU and memory by line (with the
//! native functions under each), by function and by thread, what is held at the peak, leaks,
//! regions, hints and warnings, laid out at a width (`render::layout`: the columns that fit,
//! source text cut, prose wrapped). Program text is escaped (`sanitize`) before it is measured.

mod lines;
mod summary;
mod tables;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use super::layout::{cut, Doc, Tone};
use crate::model::{Exit, Measures, Profile};
use crate::sanitize::clean;

/// How the report is shown: colour (a terminal, and `NO_COLOR` unset) and the width to lay it
/// out at (`None`: no limit, every column, one line per row and hint).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Use ANSI colours.
    pub color: bool,
    /// Width in terminal cells (at least `layout::MIN_WIDTH`).
    pub width: Option<usize>,
}

/// Render the terminal report in `style`: at its width, tables show the columns that fit (line
/// number, time and the start of the source first), source text and names are cut, prose
/// (hints, warnings, notes) is wrapped; no line is wider.
pub fn render_styled(p: &Profile, style: Style) -> String {
    let mut doc = Doc::new(style.width);
    report(&mut doc, p);
    doc.finish(style.color)
}

/// Render the terminal report, plain and without a width limit.
pub fn render(p: &Profile) -> String {
    render_styled(p, Style::default())
}

fn report(doc: &mut Doc, p: &Profile) {
    summary::header(doc, p);
    if !p.ranks.is_empty() {
        tables::ranks(doc, p);
    }
    if p.processes.len() > 1 {
        tables::processes(doc, p);
    }
    lines::lines(doc, p);
    tables::functions(doc, p);
    tables::threads(doc, p);
    summary::held(doc, p);
    summary::leaks(doc, p);
    tables::regions(doc, p);
    summary::hints(doc, p);
    for warning in &p.warnings {
        doc.wrap(Tone::Warning, 0, &format!("warning: {}", clean(warning)), 9);
    }
}

/// Lines below this share of the sampled time are left out of the tables.
const MIN_SHARE: f64 = 0.005;
/// Source text is cut to this many cells, however wide the terminal.
const SOURCE_CELLS: usize = 60;

fn total_time(m: &Measures) -> f64 {
    m.time_s()
}

fn pct(part: f64, whole: f64) -> String {
    if whole <= 0.0 {
        return "-".to_string();
    }
    format!("{:.0}%", 100.0 * part / whole)
}

/// A line's source text for a table: trimmed, control characters escaped, cut to
/// [`SOURCE_CELLS`].
fn source_text(source: &str) -> String {
    let clean = clean(source.trim());
    match cut(&clean, SOURCE_CELLS) {
        Cow::Borrowed(_) => clean.into_owned(),
        Cow::Owned(cut) => cut,
    }
}

/// The file name without its directories.
fn short(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
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
