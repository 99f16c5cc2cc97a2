//! How a text document is laid out for where it goes: its width (as git decides it: `--width`,
//! else `COLUMNS`, else the terminal's own, else [`PIPED_WIDTH`] for a pipe or a file) and its
//! colour (on a terminal, unless `NO_COLOR` is set: <https://no-color.org>).

use super::Destination;
use crate::render::text::Style;
use crate::render::MIN_WIDTH;

/// The width of a document written to a pipe or a file, without `--width` or `COLUMNS`: what
/// an editor, a pager or a CI log shows without folding (rustfmt's line width).
pub(super) const PIPED_WIDTH: usize = 100;

/// `--width`'s value: 0 (no limit) or 40 cells and more.
pub(super) fn width_arg(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(w) if w == 0 || w >= MIN_WIDTH => Ok(w),
        _ => Err(format!(
            "'{text}' is not a width: 0 (no limit) or {MIN_WIDTH} columns and more"
        )),
    }
}

/// The style of a document written to `destination`, `flag` being `--width`.
pub(super) fn style_for(destination: &Destination, flag: Option<usize>) -> Style {
    match destination {
        Destination::Stdout => style(Some(libc::STDOUT_FILENO), flag),
        Destination::Stderr => style(Some(libc::STDERR_FILENO), flag),
        _ => style(None, flag),
    }
}

/// The style of a document written to `fd` (`None`: a file), `flag` being `--width`.
pub(super) fn style(fd: Option<libc::c_int>, flag: Option<usize>) -> Style {
    // SAFETY: isatty only inspects the descriptor.
    let terminal = fd.is_some_and(|fd| unsafe { libc::isatty(fd) } == 1);
    let width = match flag {
        Some(0) => None,
        Some(w) => Some(w),
        None => Some(
            columns()
                .or_else(|| fd.filter(|_| terminal).and_then(terminal_width))
                .unwrap_or(PIPED_WIDTH)
                .max(MIN_WIDTH),
        ),
    };
    Style {
        color: terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        width,
    }
}

/// `COLUMNS`, when it is a positive number (as git and ls read it).
fn columns() -> Option<usize> {
    std::env::var("COLUMNS")
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&w| w > 0)
}

/// The width of the terminal at `fd` (`TIOCGWINSZ`), when it says one.
fn terminal_width(fd: libc::c_int) -> Option<usize> {
    // SAFETY: winsize is plain data, filled by the kernel.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ on a terminal descriptor with a valid winsize pointer.
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_below_the_narrowest_are_refused() {
        assert_eq!(width_arg("0"), Ok(0));
        assert_eq!(width_arg("40"), Ok(40));
        assert_eq!(width_arg("240"), Ok(240));
        for bad in ["39", "1", "-1", "wide", ""] {
            let err = width_arg(bad).unwrap_err();
            assert!(err.contains("0 (no limit) or 40 columns"), "{err}");
        }
    }

    /// The flag wins over everything, 0 lifting the limit; a file without either gets the
    /// pipe's width (COLUMNS is read from this process's environment, so that case is left to
    /// the end-to-end tests, which set it per command).
    #[test]
    fn the_flag_decides_first_and_files_get_the_piped_width() {
        assert_eq!(style(None, Some(0)).width, None);
        assert_eq!(style(None, Some(72)).width, Some(72));
        assert!(!style(None, Some(72)).color, "no colour in a file");
        if std::env::var_os("COLUMNS").is_none() {
            assert_eq!(style(None, None).width, Some(PIPED_WIDTH));
        }
    }
}
