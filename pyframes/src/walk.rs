//! The frame walker: from a thread state to (code object, instruction offset) pairs, innermost
//! first, for every [`Layout`]. Pointer-only (no strings, no line tables): about ten reads per
//! frame. Every code object is type-checked against `PyCode_Type`, cycles and depth are
//! capped, shim / incomplete frames are skipped as CPython itself skips them, and on 3.15+ a
//! chain that does not end in the thread's base frame is a failed walk (as CPython's own
//! reader treats it).
//! Runs inside signal handlers: no allocation, no locks.

use crate::layouts::{FrameKind, InstrKind, Layout, CODE_UNIT_SIZE, OWNER_GENERATOR};
use crate::{Interpreter, Memory};

/// One Python frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Address of the code object.
    pub code: usize,
    /// Instruction offset in 2-byte code units (-1: not started).
    pub lasti: i32,
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Frames written to the output.
    pub depth: usize,
    /// More frames than the output holds.
    pub truncated: bool,
    /// A pointer failed validation; the frames before it are kept.
    pub failed: bool,
    /// The last frame visited (reported or skipped), 0 if none.
    pub last: usize,
}

/// Outermost frames a stack deeper than its output keeps ([`walk_ends`]), the same for the
/// preload's samples and the collector's looks: where the program's own line is under a deep
/// chain of imports.
pub const OUTER_FRAMES: usize = 16;

/// Frames a walk goes through at most to find a deep stack's outer end (each a few reads).
pub const WALK_LIMIT: usize = 512;

/// Walk `tstate`'s frames into `out`, innermost first; a deeper stack keeps the innermost.
pub fn walk(mem: &impl Memory, rt: &Interpreter, tstate: usize, out: &mut [Frame]) -> Walk {
    walk_ends(mem, rt, tstate, out, 0, out.len())
}

/// Walk `tstate`'s frames into `out`, innermost first. A stack deeper than `out` keeps its
/// innermost frames and, in the last `outer` places, the outermost `outer` frames among the
/// first `limit` (`truncated`: the frames between are left out). The outer end is where the
/// program's own line is when a deep chain of imports or library calls runs under it (an
/// `import lightning` 20 import levels down, a deep recursion): keeping only the innermost
/// frames lost it.
pub fn walk_ends(
    mem: &impl Memory,
    rt: &Interpreter,
    tstate: usize,
    out: &mut [Frame],
    outer: usize,
    limit: usize,
) -> Walk {
    let l = rt.layout;
    let outer = outer.min(out.len());
    let inner = out.len() - outer;
    let limit = limit.max(out.len());
    let mut walk = Walk::default();
    // Frames reported so far; past `out.len()` the last `outer` places are a ring.
    let mut seen = 0usize;
    let Some(mut frame) = top_frame(mem, l, tstate) else {
        return walk;
    };
    // Frames visited, including skipped shims; bounds the loop even on a corrupt chain.
    for _ in 0..limit * 2 + 16 {
        if frame == 0 {
            // 3.15+: every complete chain ends in the base frame inside the thread state.
            if let Some(base) = l.tstate_base_frame.filter(|_| walk.last != 0) {
                walk.failed |= mem.word(tstate + base) != Some(walk.last);
            }
            return ended(walk, out, inner, seen);
        }
        walk.last = frame;
        match read_frame(mem, rt, frame) {
            Some(Some(f)) => {
                if seen >= out.len() {
                    walk.truncated = true;
                    if outer == 0 || seen >= limit {
                        return ended(walk, out, inner, seen);
                    }
                }
                let at = match seen < out.len() {
                    true => seen,
                    false => inner + (seen - inner) % outer,
                };
                if let Some(slot) = out.get_mut(at) {
                    *slot = f;
                }
                seen += 1;
            }
            Some(None) => {} // a shim or incomplete frame: skip it
            None => {
                walk.failed = true;
                return ended(walk, out, inner, seen);
            }
        }
        match mem.word(frame + l.frame_back) {
            Some(next) if next != frame => frame = next,
            _ => {
                walk.failed = true;
                return ended(walk, out, inner, seen);
            }
        }
    }
    walk.truncated = true;
    ended(walk, out, inner, seen)
}

/// The walk's result once `seen` frames were reported: where more than `out` holds came, the
/// ring of outer frames (`out[inner..]`) turned so that they run outward in order.
fn ended(mut walk: Walk, out: &mut [Frame], inner: usize, seen: usize) -> Walk {
    walk.depth = seen.min(out.len());
    let outer = out.len() - inner;
    if seen > out.len() && outer > 0 {
        // Frame k >= inner sits at inner + (k - inner) % outer; the oldest kept is seen - outer.
        let oldest = (seen - outer - inner) % outer;
        if let Some(ring) = out.get_mut(inner..) {
            ring.rotate_left(oldest);
        }
    }
    walk
}

/// The innermost frame, or `None` if the thread state cannot be read; `Some(0)` = no frame.
fn top_frame(mem: &impl Memory, l: &Layout, tstate: usize) -> Option<usize> {
    match l.frame_kind {
        FrameKind::Legacy | FrameKind::Direct => mem.word(tstate + l.tstate_frame),
        FrameKind::Cframe => {
            let cframe = mem.pointer(tstate + l.tstate_frame)?;
            mem.word(cframe + l.cframe_current_frame)
        }
    }
}

/// `Some(Some(frame))` for a frame to report, `Some(None)` for one to skip, `None` if the
/// frame does not look like a frame.
fn read_frame(mem: &impl Memory, rt: &Interpreter, frame: usize) -> Option<Option<Frame>> {
    let l = rt.layout;
    let owner = match l.frame_owner {
        Some(offset) => mem.byte(frame + offset)?,
        None => 0,
    };
    if l.owner_shim.is_some_and(|shim| owner >= shim) {
        return Some(None);
    }
    // 3.14+: a `_PyStackRef`, the object with its tag bits cleared.
    let code = mem.word(frame + l.frame_code)? & !l.executable_tag_mask;
    if !crate::plausible(code, 8, 8) {
        return None;
    }
    if mem.word(code + l.object_type)? != rt.code_type {
        // 3.13+: f_executable may be another object (a skipped frame); earlier: corruption.
        return if l.frame_kind == FrameKind::Direct {
            Some(None)
        } else {
            None
        };
    }
    let lasti = match l.instr_kind {
        InstrKind::LastiBytes => match mem.int(frame + l.frame_instr)? {
            bytes if bytes < 0 => -1,
            bytes => bytes / CODE_UNIT_SIZE as i32,
        },
        InstrKind::LastiCodeUnits => mem.int(frame + l.frame_instr)?,
        InstrKind::PrevInstr | InstrKind::InstrPtr => {
            let instr = mem.word(frame + l.frame_instr)?;
            let start = bytecode(mem, l, frame, code)?;
            let units = (instr as isize - start as isize) / CODE_UNIT_SIZE as isize;
            if incomplete(mem, l, code, owner, units) {
                return Some(None);
            }
            units.clamp(-1, i32::MAX as isize) as i32
        }
    };
    Some(Some(Frame { code, lasti }))
}

/// Where the bytecode the frame runs starts: inline in the code object, or (free-threaded
/// 3.14+) the thread-local copy `co_tlbc->entries[frame->tlbc_index]`.
fn bytecode(mem: &impl Memory, l: &Layout, frame: usize, code: usize) -> Option<usize> {
    let (Some(index), Some(tlbc), Some(entries)) =
        (l.frame_tlbc_index, l.code_tlbc, l.code_array_entries)
    else {
        return Some(code + l.code_adaptive?);
    };
    let index = usize::try_from(mem.int(frame + index)?).ok()?;
    let array = mem.pointer(code + tlbc)?;
    if index >= mem.word(array)? {
        return None;
    }
    mem.pointer(array + entries + index.checked_mul(8)?)
}

/// CPython's `_PyFrame_IsIncomplete` (3.11+): a frame still running its prologue.
fn incomplete(mem: &impl Memory, l: &Layout, code: usize, owner: u8, units: isize) -> bool {
    let Some(offset) = l.code_firsttraceable else {
        return false;
    };
    let first = mem.int(code + offset).unwrap_or(0) as isize;
    owner != OWNER_GENERATOR && units < first
}

/// Every thread state of the main interpreter: `(tstate, pthread id, kernel tid if known)`,
/// up to `out.len()`. `runtime` is the address of `_PyRuntime`.
pub fn threads(
    mem: &impl Memory,
    l: &Layout,
    runtime: usize,
    out: &mut [(usize, usize, Option<u32>)],
) -> usize {
    let Some(interp) = mem.pointer(runtime + l.runtime_interpreters_head) else {
        return 0;
    };
    let mut tstate = mem.word(interp + l.interp_threads_head).unwrap_or(0);
    let mut n = 0;
    while tstate != 0 && n < out.len() {
        let pthread = mem.word(tstate + l.tstate_thread_id).unwrap_or(0);
        let tid = l
            .tstate_native_thread_id
            .and_then(|o| mem.word(tstate + o))
            .map(|t| t as u32);
        out[n] = (tstate, pthread, tid);
        n += 1;
        match mem.word(tstate + l.tstate_next) {
            Some(next) if next != tstate => tstate = next,
            _ => break,
        }
    }
    n
}
