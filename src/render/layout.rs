//! Terminal layout shared by the text documents (the report, `mlprof diff`, `mlprof sweep`):
//! widths measured in terminal cells (a CJK character takes two, an escaped control character
//! the length of its escape), text cut or wrapped to a width, tables whose columns are chosen by
//! the width (those that fit, most important first, as `htop` and `ps` do), and lines with a
//! tone, coloured when the document is finished. It escapes nothing: callers hand it text
//! already [`crate::sanitize::clean`]ed, so what it measures is what the terminal shows.

use std::borrow::Cow;
use std::fmt::Write as _;

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The narrowest layout: a narrower width is laid out at this (the terminal then folds the
/// longer lines, but every table still fits its first column and the start of its text).
pub const MIN_WIDTH: usize = 40;

/// The text of a table (source, command) keeps at least this many cells, or all of it if
/// shorter, whatever else its row shows.
pub const TEXT_MIN: usize = 16;

/// Cells `text` takes on a terminal.
pub fn cells(text: &str) -> usize {
    text.width()
}

/// `text` cut to at most `max` cells, ending in `…` when cut.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if cells(text) <= max {
        return Cow::Borrowed(text);
    }
    if max == 0 {
        return Cow::Borrowed("");
    }
    let mut end = prefix_end(text, max - 1);
    // A sequence wider as a whole than its characters (an emoji with a variation selector) is
    // shortened further.
    while end > 0 && cells(&text[..end]) > max - 1 {
        end = text[..end].char_indices().next_back().map_or(0, |(i, _)| i);
    }
    Cow::Owned(format!("{}…", &text[..end]))
}

/// `text` cut from its start to at most `max` cells (`…/scripts/train.py`): for paths, whose
/// end names the file.
pub fn cut_start(text: &str, max: usize) -> Cow<'_, str> {
    if cells(text) <= max {
        return Cow::Borrowed(text);
    }
    if max == 0 {
        return Cow::Borrowed("");
    }
    let mut used = 0;
    let mut start = text.len();
    for (i, c) in text.char_indices().rev() {
        used += c.width().unwrap_or(0);
        if used > max - 1 {
            break;
        }
        start = i;
    }
    while start < text.len() && cells(&text[start..]) > max - 1 {
        start += text[start..].chars().next().map_or(1, char::len_utf8);
    }
    Cow::Owned(format!("…{}", &text[start..]))
}

/// The byte index up to which `text`'s characters take at most `max` cells.
fn prefix_end(text: &str, max: usize) -> usize {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += c.width().unwrap_or(0);
        if used > max {
            return i;
        }
    }
    text.len()
}

/// `name (place)` in at most `room` cells: the name is cut (`…`) before the place is, as long
/// as it keeps eight cells; past that the whole is cut at its end.
pub fn name_and_place(name: &str, place: &str, room: usize) -> String {
    let whole = format!("{name} ({place})");
    if cells(&whole) <= room {
        return whole;
    }
    let tail = cells(place) + 3;
    match room.checked_sub(tail) {
        Some(left) if left >= 8.min(cells(name)) => format!("{} ({place})", cut(name, left)),
        _ => cut(&whole, room).into_owned(),
    }
}

/// `text` padded with spaces to `width` cells, on the left (`right`) or the right.
pub fn pad(text: &str, width: usize, right: bool) -> String {
    let fill = " ".repeat(width.saturating_sub(cells(text)));
    if right {
        format!("{fill}{text}")
    } else {
        format!("{text}{fill}")
    }
}

/// `text` in lines of at most `width` cells, broken at spaces: the first line indented by
/// `indent` spaces, the others by `hang`. A word longer than a line is split; the spaces at a
/// break are dropped, others kept (two spaces inside source text stay two).
pub fn wrap(indent: usize, text: &str, hang: usize, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = " ".repeat(indent);
    let mut used = indent;
    let mut fresh = true;
    for word in text.split(' ') {
        if fresh && word.is_empty() {
            continue;
        }
        let mut word = word;
        loop {
            let gap = usize::from(!fresh);
            let room = width.saturating_sub(used + gap);
            // Whether it fits is told by its first `room` cells alone: a word of megabytes is
            // not measured whole for every line it is split into (that made wrapping quadratic
            // in its length).
            let fits = prefix_end(word, room) == word.len();
            let w = if fits { cells(word) } else { room + 1 };
            if w <= room {
                if !fresh {
                    line.push(' ');
                }
                line.push_str(word);
                used += gap + w;
                fresh = false;
                break;
            }
            if fresh {
                // Alone on its line and still too long: as much as fits (a character at least).
                let mut end = prefix_end(word, room);
                if end == 0 {
                    end = word.chars().next().map_or(word.len(), char::len_utf8);
                }
                line.push_str(&word[..end]);
                word = &word[end..];
                if word.is_empty() {
                    fresh = false;
                    break;
                }
            }
            lines.push(std::mem::replace(&mut line, " ".repeat(hang)));
            used = hang;
            fresh = true;
        }
    }
    if !fresh || lines.is_empty() {
        lines.push(line);
    }
    for line in &mut lines {
        line.truncate(line.trim_end().len());
    }
    lines
}

/// How a line is coloured on a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Plain,
    /// A title: bold.
    Title,
    /// A warning: yellow.
    Warning,
    /// Something wrong with the program (a likely leak): red.
    Alert,
    /// A detail under a row (the native functions under a line): dim.
    Dim,
}

impl Tone {
    fn ansi(self) -> Option<&'static str> {
        match self {
            Tone::Plain => None,
            Tone::Title => Some("\x1b[1m"),
            Tone::Warning => Some("\x1b[33m"),
            Tone::Alert => Some("\x1b[31m"),
            Tone::Dim => Some("\x1b[2m"),
        }
    }
}

/// A document laid out line by line at a width; `None`: no limit (nothing is cut or wrapped,
/// a table shows every column).
pub struct Doc {
    width: Option<usize>,
    lines: Vec<(Tone, String)>,
}

impl Doc {
    /// A document at `width` cells (at least [`MIN_WIDTH`]), or without limit.
    pub fn new(width: Option<usize>) -> Doc {
        Doc {
            width: width.map(|w| w.max(MIN_WIDTH)),
            lines: Vec::new(),
        }
    }

    /// The width lines are laid out at.
    pub fn width(&self) -> Option<usize> {
        self.width
    }

    pub fn blank(&mut self) {
        self.lines.push((Tone::Plain, String::new()));
    }

    /// A line cut at its end (`…`) if it is too wide.
    pub fn line(&mut self, tone: Tone, text: &str) {
        self.row(tone, "", text);
    }

    /// `keep` whole, then `rest` cut to the room left (a `keep` too wide alone is cut too).
    pub fn row(&mut self, tone: Tone, keep: &str, rest: &str) {
        let text = match self.width {
            None => format!("{keep}{rest}"),
            Some(w) if cells(keep) >= w => cut(&format!("{keep}{rest}"), w).into_owned(),
            Some(w) => format!("{keep}{}", cut(rest, w - cells(keep))),
        };
        self.lines.push((tone, text));
    }

    /// Prose, wrapped at spaces to the width: the first line indented by `indent`, the others
    /// by `hang` (one line without a limit).
    pub fn wrap(&mut self, tone: Tone, indent: usize, text: &str, hang: usize) {
        match self.width {
            None => self
                .lines
                .push((tone, format!("{}{text}", " ".repeat(indent)))),
            Some(w) => {
                for line in wrap(indent, text, hang, w) {
                    self.lines.push((tone, line));
                }
            }
        }
    }

    /// The document as text, each line coloured by its tone when `color`.
    pub fn finish(self, color: bool) -> String {
        let mut out = String::new();
        for (tone, line) in self.lines {
            match (color, tone.ansi()) {
                (true, Some(code)) => {
                    let _ = writeln!(out, "{code}{line}\x1b[0m");
                }
                _ => {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
        out
    }
}

/// How long a column stays as the width shrinks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// At any width (the row's key: a line number, a pid, a name).
    Always,
    /// The leading figures, in this order: shown before any other column, the text keeping
    /// only [`TEXT_MIN`] cells.
    Lead(u8),
    /// In this order after the leading ones, while the text keeps a quarter of the width (24
    /// cells at least); a column with nothing to show (`empty`) only where every other fits.
    Extra(u8),
}

/// A column a table may show.
pub struct Column {
    pub header: String,
    /// Cells it takes at least (a wider cell or header widens it).
    pub width: usize,
    /// Right-aligned (figures), else left-aligned.
    pub right: bool,
    pub keep: Keep,
    /// A column this one means nothing without (the Python share of the bytes allocated).
    pub needs: Option<usize>,
    /// Whether every cell is a zero or blank: such a column gives way first.
    pub empty: bool,
}

impl Column {
    pub fn right(header: impl Into<String>, width: usize, keep: Keep) -> Column {
        Column {
            header: header.into(),
            width,
            right: true,
            keep,
            needs: None,
            empty: false,
        }
    }

    pub fn left(header: impl Into<String>, width: usize, keep: Keep) -> Column {
        Column {
            right: false,
            ..Column::right(header, width, keep)
        }
    }

    pub fn needs(self, column: usize) -> Column {
        Column {
            needs: Some(column),
            ..self
        }
    }

    pub fn empty(self, empty: bool) -> Column {
        Column { empty, ..self }
    }
}

/// A table: `indent` spaces, its columns one space apart, then (if it has one) a text column
/// `gap` spaces after them, left-aligned, taking what room is left.
pub struct Table {
    pub indent: usize,
    pub columns: Vec<Column>,
    /// The text column's header, if the table has one.
    pub text: Option<&'static str>,
    pub gap: usize,
}

/// The columns a table shows at a width and their widths.
pub struct Layout {
    indent: usize,
    gap: usize,
    shown: Vec<bool>,
    widths: Vec<usize>,
    headers: Vec<String>,
    right: Vec<bool>,
    text: Option<&'static str>,
}

impl Table {
    /// The columns shown at `width` (`None`: all of them), given the rows' cells (as many as
    /// columns) and the widest text (cells).
    pub fn layout(self, rows: &[Vec<String>], text_cells: usize, width: Option<usize>) -> Layout {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                rows.iter()
                    .filter_map(|r| r.get(i))
                    .map(|s| cells(s))
                    .chain([c.width, cells(&c.header)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let shown = match width {
            None => vec![true; self.columns.len()],
            Some(w) => self.choose(&widths, text_cells, w),
        };
        Layout {
            indent: self.indent,
            gap: self.gap,
            shown,
            widths,
            headers: self.columns.iter().map(|c| c.header.clone()).collect(),
            right: self.columns.iter().map(|c| c.right).collect(),
            text: self.text,
        }
    }

    /// The columns kept at `width`: each in order of importance while the line still fits,
    /// leaving its text the room its rank asks.
    fn choose(&self, widths: &[usize], text_cells: usize, width: usize) -> Vec<bool> {
        let want = (width / 4).max(24);
        let reserve = |room: usize| match self.text {
            Some(_) => self.gap + room.min(text_cells),
            None => 0,
        };
        let mut shown: Vec<bool> = self
            .columns
            .iter()
            .map(|c| c.keep == Keep::Always)
            .collect();
        let mut used = self.indent
            + (0..widths.len())
                .filter(|&i| shown[i])
                .map(|i| widths[i] + 1)
                .sum::<usize>();
        let mut order: Vec<usize> = (0..self.columns.len()).filter(|&i| !shown[i]).collect();
        order.sort_by_key(|&i| {
            let c = &self.columns[i];
            match c.keep {
                Keep::Always => (0, false, 0),
                Keep::Lead(n) => (1, false, n),
                Keep::Extra(n) => (2, c.empty, n),
            }
        });
        // An empty column shows only where every other one could.
        let mut refused = false;
        for i in order {
            let c = &self.columns[i];
            if c.needs.is_some_and(|n| !shown[n]) || (c.empty && refused) {
                continue;
            }
            let room = match c.keep {
                Keep::Extra(_) => reserve(want),
                _ => reserve(TEXT_MIN),
            };
            // `used` counts a space after every column shown: with this one's, one too many.
            if used + widths[i] + room <= width {
                shown[i] = true;
                used += widths[i] + 1;
            } else {
                refused = true;
            }
        }
        shown
    }
}

impl Layout {
    /// The header row, with the text column's header.
    pub fn header(&self) -> String {
        let mut out = self.prefix(&self.headers);
        out.push_str(self.text.unwrap_or(""));
        if self.text.is_none() {
            out.truncate(out.trim_end().len());
        }
        out
    }

    /// A row's columns, padded, up to where its text starts.
    pub fn prefix(&self, cells: &[String]) -> String {
        let mut out = " ".repeat(self.indent);
        let mut first = true;
        for (i, cell) in cells.iter().enumerate() {
            if !self.shown.get(i).copied().unwrap_or(false) {
                continue;
            }
            if !first {
                out.push(' ');
            }
            first = false;
            out.push_str(&pad(cell, self.widths[i], self.right[i]));
        }
        if self.text.is_some() {
            out.push_str(&" ".repeat(self.gap));
        }
        out
    }

    /// A row without text (a table that has none).
    pub fn row(&self, cells: &[String]) -> String {
        let mut out = self.prefix(cells);
        out.truncate(out.trim_end().len());
        out
    }

    /// Whether `column` is shown.
    pub fn shows(&self, column: usize) -> bool {
        self.shown.get(column).copied().unwrap_or(false)
    }

    /// The cell offset where `column` ends, if it is shown.
    pub fn end_of(&self, column: usize) -> Option<usize> {
        if !self.shows(column) {
            return None;
        }
        let before: usize = (0..column)
            .filter(|&i| self.shown[i])
            .map(|i| self.widths[i] + 1)
            .sum();
        Some(self.indent + before + self.widths[column])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_terminal_cells() {
        assert_eq!(cells("abc"), 3);
        assert_eq!(cells("配列"), 4, "wide characters take two cells");
        assert_eq!(cells("\\x1b[2J"), 7, "an escape takes its length");
        assert_eq!(cells("▁▂█…"), 4);
    }

    #[test]
    fn cutting_counts_cells_and_marks_the_cut() {
        assert_eq!(cut("y = np.array(x)", 20), "y = np.array(x)");
        assert_eq!(cut("y = np.array(x)", 8), "y = np.…");
        assert_eq!(cut("配列の合計", 6), "配列…");
        assert_eq!(
            cells(&cut("配列の合計", 6)),
            5,
            "never half a wide character"
        );
        assert_eq!(cut("abc", 0), "");
        assert_eq!(cut_start("/work/scripts/train.py", 12), "…ts/train.py");
        assert_eq!(cut_start("/w/配列/t.py", 8), "…列/t.py");
        for s in ["a\u{1f600}\u{fe0f}b", "x☺\u{fe0f}\u{fe0f}y z"] {
            for max in 1..6 {
                assert!(cells(&cut(s, max)) <= max, "{s:?} at {max}");
                assert!(cells(&cut_start(s, max)) <= max, "{s:?} at {max}");
            }
        }
    }

    #[test]
    fn names_lose_their_end_before_their_place() {
        let n = "process_a_very_long_function_name";
        assert_eq!(name_and_place(n, "t.py:3", 80), format!("{n} (t.py:3)"));
        assert_eq!(name_and_place(n, "t.py:3", 25), "process_a_very_… (t.py:3)");
        assert_eq!(cells(&name_and_place(n, "a_long_library.so", 20)), 20);
    }

    /// A word of 20 MiB (a saved profile's command line can hold one) is split in one pass:
    /// before, each line measured the rest of the word, and this took hours.
    #[test]
    fn a_huge_word_is_wrapped_in_one_pass() {
        let word = "x".repeat(20 << 20);
        let lines = wrap(2, &format!("a {word} b"), 4, 80);
        let joined: usize = lines.iter().map(|l| l.trim_start().len()).sum();
        assert_eq!(joined, (20 << 20) + 3, "a, the word, a space and b");
        assert!(lines.iter().all(|l| cells(l) <= 80));
        let n: usize = 20 << 20;
        assert_eq!(lines.len(), 1 + n.div_ceil(76));
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_keeps_every_word() {
        let text = "work in place (`a += b`, `out=`), use `np.asarray` instead of `np.array`";
        let lines = wrap(2, text, 4, 30);
        assert!(lines.iter().all(|l| cells(l) <= 30), "{lines:#?}");
        assert!(lines[0].starts_with("  work") && lines[1].starts_with("    "));
        let words: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(words, text.split_whitespace().collect::<Vec<_>>());
        // Two spaces inside a line stay; a word longer than a line is split.
        assert_eq!(wrap(0, "a  b", 0, 40), ["a  b"]);
        let long = wrap(2, &format!("x {}", "配".repeat(30)), 2, 20);
        assert!(long.iter().all(|l| cells(l) <= 20), "{long:#?}");
        assert_eq!(long.concat().matches('配').count(), 30);
        assert_eq!(wrap(2, "", 4, 20), [""]);
    }

    fn table() -> Table {
        Table {
            indent: 2,
            columns: vec![
                Column::right("line", 6, Keep::Always),
                Column::right("time", 8, Keep::Lead(0)),
                Column::right("held", 10, Keep::Extra(1)),
                Column::right("allocated", 10, Keep::Extra(2)),
                Column::right("Py", 4, Keep::Extra(3)).needs(3),
                Column::left("leak", 4, Keep::Extra(0)).empty(true),
            ],
            text: Some("source"),
            gap: 1,
        }
    }

    #[test]
    fn columns_are_chosen_by_importance_while_the_text_keeps_room() {
        let rows = vec![vec!["12", "1.20 s", "3.0 MiB", "9.0 MiB", "50%", ""]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()];
        let all = table().layout(&rows, 60, None);
        assert_eq!(
            all.header(),
            "    line     time       held  allocated   Py leak source"
        );
        let narrow = table().layout(&rows, 60, Some(40));
        assert_eq!(narrow.header(), "    line     time source");
        let mid = table().layout(&rows, 60, Some(60));
        // held fits beside 24 cells of text; allocated would not, so neither does Py, nor the
        // empty column, which would.
        assert_eq!(mid.header(), "    line     time       held source");
        assert_eq!(mid.end_of(2), Some(28));
        assert_eq!(mid.end_of(3), None);
        // Short text leaves more room for figures; the empty column still comes last.
        let short = table().layout(&rows, 10, Some(60));
        assert_eq!(
            short.header(),
            "    line     time       held  allocated   Py leak source"
        );
        let short = table().layout(&rows, 10, Some(55));
        assert_eq!(
            short.header(),
            "    line     time       held  allocated   Py source"
        );
        for w in [40, 50, 60, 70, 80] {
            let l = table().layout(&rows, 60, Some(w));
            assert!(cells(&l.prefix(&rows[0])) + TEXT_MIN <= w, "{w}");
        }
    }

    #[test]
    fn a_document_cuts_rows_wraps_prose_and_colours_lines() {
        let mut doc = Doc::new(Some(40));
        doc.row(Tone::Plain, "      12   1.20 s ", &"x".repeat(40));
        doc.wrap(Tone::Warning, 0, &"warning: word ".repeat(6), 9);
        doc.line(Tone::Title, "Title");
        let plain = Doc::new(Some(10)).finish(true);
        assert_eq!(plain, "");
        let out = doc.finish(true);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], format!("      12   1.20 s {}…", "x".repeat(21)));
        assert!(lines[1].starts_with("\x1b[33mwarning: word"), "{out}");
        assert!(lines[2].starts_with("\x1b[33m         word"), "{out}");
        assert_eq!(*lines.last().unwrap(), "\x1b[1mTitle\x1b[0m");
        let mut free = Doc::new(None);
        free.wrap(Tone::Plain, 2, &"word ".repeat(40), 4);
        assert_eq!(free.finish(false).lines().count(), 1, "no limit: one line");
    }
}
