//! The self-check a layout read from the interpreter's own `_Py_DebugOffsets` must pass before
//! any line is attributed with it (a newer minor than any known, or one whose offsets differ
//! from the derived table): a walk of a live thread's stack must end where the chain ends
//! (3.15+: in the thread's base frame), and every frame on it must hold a code object whose
//! file name and qualified name are `str` objects shaped like a file name and a qualified name,
//! whose line table is a `bytes` object, whose first line is plausible and whose instruction
//! offset lies inside its bytecode; and the stack must hold a known code object: a module's
//! (`<module>`), whose first line CPython always sets to 1 (3.10+), so that a first line read
//! from the wrong place shows. A layout off by one field fails one of these. No allocation: it
//! runs in the preload library.

use crate::code::{describe, Blob};
use crate::layouts::{Layout, CODE_UNIT_SIZE};
use crate::walk::{walk, Frame};
use crate::{Interpreter, Memory};

/// The type objects the check compares against (`PyUnicode_Type`, `PyBytes_Type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Types {
    pub unicode: usize,
    pub bytes: usize,
}

/// The verdict on one thread's stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Every frame checks out, a module's among them: the number of frames.
    Passed(usize),
    /// Nothing to check yet: no Python frame, no module's frame, or too deep a stack to see
    /// its end.
    NotYet,
    /// The layout does not describe this interpreter: what failed.
    Failed(&'static str),
}

/// Deepest stack the check walks whole.
const DEPTH: usize = 128;
/// Bytes of a name looked at.
const TEXT: usize = 128;

/// Check the layout in `rt` on the stack of thread state `tstate`.
pub fn self_check(mem: &impl Memory, rt: &Interpreter, types: &Types, tstate: usize) -> Check {
    if types.unicode == 0 || types.bytes == 0 {
        return Check::Failed("no type objects to check against");
    }
    let mut frames = [Frame::default(); DEPTH];
    let w = walk(mem, rt, tstate, &mut frames);
    if w.failed {
        return Check::Failed("the frame chain");
    }
    if w.truncated {
        return Check::NotYet;
    }
    let Some(frames) = frames.get(..w.depth).filter(|f| !f.is_empty()) else {
        return Check::NotYet;
    };
    let mut module = false;
    for f in frames {
        match code_object(mem, rt, types, f) {
            Ok(is_module) => module |= is_module,
            Err(what) => return Check::Failed(what),
        }
    }
    if module {
        Check::Passed(w.depth)
    } else {
        Check::NotYet
    }
}

/// Whether the frame's code object checks out; `Ok(true)` for a module's.
fn code_object(
    mem: &impl Memory,
    rt: &Interpreter,
    types: &Types,
    f: &Frame,
) -> Result<bool, &'static str> {
    let l = rt.layout;
    let is = |field: usize, ty: usize| {
        mem.pointer(f.code + field)
            .and_then(|o| mem.word(o + l.object_type))
            == Some(ty)
    };
    if !is(l.code_filename, types.unicode) || !is(l.code_name, types.unicode) {
        return Err("a code object's names");
    }
    if l.code_qualname.is_some_and(|q| !is(q, types.unicode)) {
        return Err("a code object's qualified name");
    }
    if !is(l.code_linetable, types.bytes) {
        return Err("a code object's line table");
    }
    let first = match mem.int(f.code + l.code_firstlineno) {
        Some(line) if (0..1 << 24).contains(&line) => line,
        _ => return Err("a code object's first line"),
    };
    // The bytecode's length in code units: the code object's own `ob_size` (3.11+, where it
    // is inline), or its `co_code` bytes (3.9/3.10).
    let units = match l.code_code {
        Some(at) => mem
            .pointer(f.code + at)
            .and_then(|b| mem.word(b + l.bytes_size))
            .map(|bytes| bytes / CODE_UNIT_SIZE),
        None => mem.word(f.code + l.bytes_size),
    };
    // -1: not started (3.9/3.10), or before the first instruction (`prev_instr`).
    let inside = units.is_some_and(|n| f.lasti >= -1 && (f.lasti as isize) < n as isize);
    if !inside {
        return Err("an instruction offset");
    }
    let facts = describe(mem, l, f.code, TEXT);
    let mut buf = [0u8; TEXT];
    if let Some(name) = latin1(mem, facts.filename, &mut buf) {
        let file = name.first() == Some(&b'<')
            || name.contains(&b'/')
            || name.ends_with(b".py")
            || facts.filename.len >= TEXT;
        if !file {
            return Err("a code object's file name");
        }
    }
    let mut buf = [0u8; TEXT];
    let Some(qualname) = latin1(mem, facts.qualname, &mut buf) else {
        return Ok(false);
    };
    let shaped = !qualname.is_empty()
        && qualname
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"_.<>".contains(&b) || b >= 0x80);
    if !shaped {
        return Err("a code object's qualified name");
    }
    let module = qualname == b"<module>";
    if module && module_first_line(l) != first && module_first_line(l) != 0 {
        return Err("a module's first line");
    }
    Ok(module)
}

/// The first line CPython gives every module's code object (3.10+: 1); 0 where it varies.
fn module_first_line(l: &Layout) -> i32 {
    if l.minor >= 10 {
        1
    } else {
        0
    }
}

/// The bytes of a one-byte-per-character string blob (up to `buf`'s size); `None` for wider
/// strings, which are not looked into.
fn latin1<'b>(mem: &impl Memory, blob: Blob, buf: &'b mut [u8; TEXT]) -> Option<&'b [u8]> {
    if blob.kind != 1 {
        return None;
    }
    let out = buf.get_mut(..blob.len.min(TEXT))?;
    mem.bytes(blob.addr, out)?;
    Some(out)
}
