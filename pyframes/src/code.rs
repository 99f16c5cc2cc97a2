//! Describing a code object: where its file name, qualified name and line table are, and how
//! they are encoded. Locations only; the caller copies the bytes (in a signal handler into
//! wire records, in the collector into strings).

use crate::layouts::{Layout, UNICODE_STATE_KIND_MASK};
use crate::Memory;

/// Raw data of a `str` or `bytes` object in the target: address, byte length, and bytes per
/// character (1, 2, 4; 0 when unreadable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Blob {
    /// Address of the first byte.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// Bytes per character: 1 (latin-1 / bytes), 2 (UCS-2), 4 (UCS-4), 0 = nothing.
    pub kind: u8,
}

/// What identifies a code object and where its names and line table are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodeFacts {
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// Address of the `co_filename` object (with the first line, tells a reused address).
    pub filename_object: usize,
    /// `co_filename` data.
    pub filename: Blob,
    /// `co_qualname` (3.11+) or `co_name` data.
    pub qualname: Blob,
    /// Line-table bytes.
    pub linetable: Blob,
}

/// `(co_firstlineno, address of co_filename)`: cheap identity of a code object.
pub fn identity(mem: &impl Memory, l: &Layout, code: usize) -> (i32, usize) {
    (
        mem.int(code + l.code_firstlineno).unwrap_or(0),
        mem.word(code + l.code_filename).unwrap_or(0),
    )
}

/// `(co_firstlineno, co_filename and co_name addresses mixed)`: the identity a code object
/// keeps while it lives, from one read. An address reused by a new code object almost always
/// changes it, even for code made by `exec` from one file name at line 1 (dataclass methods,
/// functions defined in a loop).
pub fn fingerprint(mem: &impl Memory, l: &Layout, code: usize) -> (i32, usize) {
    let fields = [l.code_firstlineno, l.code_filename, l.code_name];
    let lo = fields.iter().copied().min().unwrap_or(0);
    let hi = fields.iter().copied().max().unwrap_or(0) + 8;
    let mut buf = [0u8; 128];
    let word_at = |buf: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[at - lo..at - lo + 8]);
        usize::from_le_bytes(w)
    };
    if hi - lo <= buf.len() && mem.bytes(code + lo, &mut buf[..hi - lo]).is_some() {
        let mut line = [0u8; 4];
        line.copy_from_slice(&buf[l.code_firstlineno - lo..l.code_firstlineno - lo + 4]);
        let names = word_at(&buf, l.code_filename) ^ word_at(&buf, l.code_name).rotate_left(29);
        return (i32::from_le_bytes(line), names);
    }
    let (line, filename) = identity(mem, l, code);
    let name = mem.word(code + l.code_name).unwrap_or(0);
    (line, filename ^ name.rotate_left(29))
}

/// Describe the code object at `code`; blobs are cut to `max_bytes`.
pub fn describe(mem: &impl Memory, l: &Layout, code: usize, max_bytes: usize) -> CodeFacts {
    let (firstlineno, filename_object) = identity(mem, l, code);
    let text = |field: usize| {
        mem.pointer(code + field)
            .and_then(|s| string(mem, l, s, max_bytes))
    };
    CodeFacts {
        firstlineno,
        filename_object,
        filename: text(l.code_filename).unwrap_or_default(),
        qualname: text(l.code_qualname.unwrap_or(l.code_name)).unwrap_or_default(),
        linetable: mem
            .pointer(code + l.code_linetable)
            .and_then(|b| bytes(mem, l, b, max_bytes))
            .unwrap_or_default(),
    }
}

/// A compact `str`'s data. Legacy (non-compact) strings are not read.
fn string(mem: &impl Memory, l: &Layout, s: usize, max_bytes: usize) -> Option<Blob> {
    let state = mem.int(s + l.unicode_state)? as u32;
    let length = mem.word(s + l.unicode_length)?;
    let kind = ((state >> l.unicode_kind_shift) & UNICODE_STATE_KIND_MASK) as u8;
    if state >> l.unicode_compact_bit & 1 == 0 || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let ascii = state >> l.unicode_ascii_bit & 1 == 1;
    // PyCompactUnicodeObject adds utf8_length and utf8 (and wstr_length before 3.12).
    let header = if ascii {
        l.ascii_object_size
    } else {
        l.compact_object_size
    };
    let cap = max_bytes / kind as usize * kind as usize;
    let len = length.checked_mul(kind as usize)?.min(cap);
    Some(Blob {
        addr: s + header,
        len,
        kind,
    })
}

fn bytes(mem: &impl Memory, l: &Layout, b: usize, max_bytes: usize) -> Option<Blob> {
    let size = mem.word(b + l.bytes_size)?;
    (size <= isize::MAX as usize).then_some(Blob {
        addr: b + l.bytes_data,
        len: size.min(max_bytes),
        kind: 1,
    })
}
