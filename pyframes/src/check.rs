//! The self-check a layout read from the interpreter's own `_Py_DebugOffsets` must pass before
//! any line is attributed with it (a newer minor than any known, or one whose offsets differ
//! from the derived table): a walk of a live thread's stack must end where the chain ends
//! (3.15+: in the thread's base frame), and every frame on it must hold a code object whose
//! file name and qualified name are `str` objects, whose line table is a `bytes` object,
//! whose first line is plausible and whose instruction offset lies inside its bytecode. A
//! layout off by one field fails one of these on the first frame. No allocation: it runs in
//! the preload library.

use crate::layouts::CODE_UNIT_SIZE;
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
    /// Every frame checks out (and there was at least one).
    Passed(usize),
    /// Nothing to check yet: no Python frame, or too deep a stack to see its end.
    NotYet,
    /// The layout does not describe this interpreter: what failed.
    Failed(&'static str),
}

/// Deepest stack the check walks whole.
const DEPTH: usize = 128;

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
    for f in frames {
        if let Err(what) = code_object(mem, rt, types, f) {
            return Check::Failed(what);
        }
    }
    Check::Passed(w.depth)
}

fn code_object(
    mem: &impl Memory,
    rt: &Interpreter,
    types: &Types,
    f: &Frame,
) -> Result<(), &'static str> {
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
    match mem.int(f.code + l.code_firstlineno) {
        Some(line) if (0..1 << 24).contains(&line) => {}
        _ => return Err("a code object's first line"),
    }
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
    Ok(())
}
