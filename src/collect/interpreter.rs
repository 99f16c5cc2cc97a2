//! Which CPython build a process runs and the layout its frames are read with from outside:
//! the same `mlprof_pyframes::layouts::layout` the preload library calls in the process, over
//! the target's memory, so both read the same offsets; and the one sentence that names what
//! mlprof reads, made from the layout list (`layouts::ALL`) for every message that says it.

use mlprof_pyframes::check::{self, Check, Types};
use mlprof_pyframes::layouts::{self, Layout, Refusal, Source};
use mlprof_pyframes::{Interpreter, Memory};

/// `CPython 3.9 to 3.15 (and the free-threaded 3.13t to 3.15t)`, from the layout list.
pub fn supported() -> String {
    let gil = |free: bool| {
        let mut minors: Vec<u8> = layouts::ALL
            .iter()
            .filter(|l| l.free_threaded == free)
            .map(|l| l.minor)
            .collect();
        minors.sort_unstable();
        (*minors.first().unwrap_or(&0), *minors.last().unwrap_or(&0))
    };
    let ((lo, hi), (tlo, thi)) = (gil(false), gil(true));
    format!("CPython 3.{lo} to 3.{hi} (and the free-threaded 3.{tlo}t to 3.{thi}t)")
}

/// `MLPROF_PYTHON_TABLES=0`: every offset `_Py_DebugOffsets` carries is taken from the
/// interpreter and self-checked, even where the derived table agrees (a test of the path a
/// minor newer than any known takes). The launched program inherits it, so its preload
/// library does the same.
pub fn tables() -> bool {
    std::env::var_os("MLPROF_PYTHON_TABLES").is_none_or(|v| v != "0")
}

/// `(major, minor, free-threaded)` of a version as profiles write it: `3.11.7`, `3.13.5t`,
/// `3.14`.
pub fn parse(version: &str) -> Option<(u8, u8, bool)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor_text = parts.next()?;
    let digits: String = minor_text
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let free = version.ends_with('t');
    Some((major, digits.parse().ok()?, free))
}

/// The layout a process running `version`, whose `_PyRuntime` is at `runtime`, is read with.
pub fn layout(
    mem: &impl Memory,
    version: &str,
    runtime: usize,
) -> std::result::Result<(Layout, Source), String> {
    let Some((major, minor, free)) = parse(version) else {
        return Err(format!("its CPython version ({version}) cannot be told"));
    };
    let build = format!("{major}.{minor}{}", if free { "t" } else { "" });
    layouts::layout(mem, runtime, (major, minor), free, tables()).map_err(|why| match why {
        Refusal::Unsupported => format!(
            "it runs CPython {build}, which mlprof cannot read (it reads {})",
            supported()
        ),
        Refusal::Unreadable => format!(
            "it runs CPython {build}, whose self-description (_Py_DebugOffsets) cannot be read"
        ),
        Refusal::NotTheTable => format!(
            "it runs CPython {build}, but its _PyRuntime holds no self-description of that version"
        ),
        Refusal::Invalid(field) => format!(
            "it runs CPython {build}, whose self-description (_Py_DebugOffsets) has an \
             implausible {field}"
        ),
    })
}

/// For a layout read from the interpreter alone: the self-check on the first thread whose
/// stack can be checked, among `tstates`. `Ok` when one passed.
pub fn self_check(
    mem: &impl Memory,
    interp: &Interpreter<'_>,
    types: &Types,
    tstates: &[usize],
) -> std::result::Result<(), String> {
    let mut failed = None;
    for &t in tstates {
        match check::self_check(mem, interp, types, t) {
            Check::Passed(_) => return Ok(()),
            Check::NotYet => {}
            Check::Failed(what) => failed = failed.or(Some(what)),
        }
    }
    Err(match failed {
        Some(what) => format!("the layout it publishes does not fit its stacks ({what})"),
        None => "no Python stack could be checked against the layout it publishes".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_their_build() {
        assert_eq!(parse("3.11.7"), Some((3, 11, false)));
        assert_eq!(parse("3.13.5t"), Some((3, 13, true)));
        assert_eq!(parse("3.14"), Some((3, 14, false)));
        assert_eq!(parse("3.15.0rc1"), Some((3, 15, false)));
        assert_eq!(parse("three"), None);
    }

    #[test]
    fn the_supported_sentence_follows_the_layout_list() {
        let s = supported();
        let newest = layouts::newest().minor;
        assert!(
            s.contains(&format!("3.{} to 3.{newest}", layouts::oldest().minor)),
            "{s}"
        );
        assert!(
            s.contains(&format!("3.{}t", layouts::oldest_free_threaded().minor)),
            "{s}"
        );
    }
}
