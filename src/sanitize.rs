//! Text from the profiled program (file names, function names, source lines, command lines,
//! native symbols) made safe to print: a terminal must never receive its control characters,
//! or a `co_filename` like `"\x1b]0;pwned\x07\x1b[2J.py"` retitles the window and clears the
//! screen, and a newline in a name breaks a line-based format. Control characters (C0, DEL,
//! C1: U+0000..U+001F, U+007F..U+009F), the Unicode line and paragraph separators and the
//! bidirectional controls (after a right-to-left override, U+202E, text displays reversed, so
//! a name can pose as another) are written visibly as `\x1b` (below U+0080) or
//! `\u{202e}`; a tab becomes a space (common inside source lines, harmless, but it would break
//! column alignment).

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` is written escaped: a control character, a line or paragraph separator, or a
/// bidirectional control (marks, embeddings, overrides, isolates).
pub fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with control characters escaped visibly (see the module documentation); borrowed
/// when there is nothing to escape.
pub fn clean(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push(' '),
            c if unsafe_char(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Displays its text [`clean`]ed, honouring width, alignment and precision (`{:<16}`).
pub struct Clean<'a>(pub &'a str);

impl fmt::Display for Clean<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&clean(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_visibly() {
        assert!(matches!(clean("/work/train.py"), Cow::Borrowed(_)));
        assert_eq!(clean("naïve → ok"), "naïve → ok");
        assert_eq!(
            clean("\x1b]0;pwned\x07\x1b[2J.py"),
            "\\x1b]0;pwned\\x07\\x1b[2J.py"
        );
        assert_eq!(clean("a\nb\rc\0d\x7f"), "a\\x0ab\\x0dc\\x00d\\x7f");
        assert_eq!(clean("csi\u{9b}2J nel\u{85}"), "csi\\u{9b}2J nel\\u{85}");
        assert_eq!(clean("x\u{2028}y"), "x\\u{2028}y");
        assert_eq!(
            clean("evil\u{202e}yp.py \u{2066}\u{200f}"),
            "evil\\u{202e}yp.py \\u{2066}\\u{200f}"
        );
        // Other format characters (a zero-width joiner in an emoji) are left alone.
        assert_eq!(clean("a\u{200d}b"), "a\u{200d}b");
        assert_eq!(clean("x = 1\t# note"), "x = 1 # note");
        for c in (0u32..0x20).chain(0x7f..0xa0) {
            let s = char::from_u32(c).unwrap().to_string();
            assert!(!clean(&s).chars().any(char::is_control), "{c:#x}");
        }
    }

    #[test]
    fn padding_applies_to_the_cleaned_text() {
        assert_eq!(format!("[{:<6}]", Clean("a\x1b")), "[a\\x1b ]");
        assert_eq!(format!("[{:>3.3}]", Clean("\x1bxyz")), "[\\x1]");
    }
}
