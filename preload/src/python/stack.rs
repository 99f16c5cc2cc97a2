//! Recording "an event and the calling thread's Python stack": one head record made by the
//! caller, then the frames in [`mlprof_wire::Kind::Frames`] records, reserved as one group so
//! no other writer's records interleave. Shared by the CPU sampler (signal
//! handler) and the memory sampler (allocation hooks): no allocation, no locks.

use mlprof_pyframes::{walk, Memory};
use mlprof_wire::{sample_flags, Frame, Record, FRAMES_PER_RECORD, UNKNOWN_CODE};

use super::{codes, read, runtime};
use crate::{channel, clock};

/// Deepest Python stack recorded: a deeper one keeps its innermost frames and its outermost
/// [`walk::OUTER_FRAMES`] (where the program's own line is under a deep chain of imports).
const MAX_DEPTH: usize = 128;

/// What the walk found, for the caller's head record.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stack {
    /// Frames that follow the head record.
    pub depth: usize,
    /// `sample_flags` bits: truncated, walk failed, no Python.
    pub flags: u32,
    /// The thread's `PyThreadState` (0 if none).
    pub tstate: usize,
}

/// How the stack may be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Through the kernel ([`read::Windowed`]): anywhere, the signal handler included.
    Checked,
    /// Plain loads ([`read::Trusted`]): an allocation or copy point of a thread holding the
    /// GIL, outside finalization.
    Trusted,
}

/// Stack bytes a walk may use below its caller: `send_with` and what it calls take about
/// 9 KiB (frames, the frames sent, read windows); four times that is kept free.
const STACK_NEEDED: usize = 36 << 10;

/// Whether this thread has room for a walk: always on its own stack (the SIGPROF handler does
/// not run on the alternate signal stack), but not necessarily while it runs on one (another
/// handler's, e.g. faulthandler's 10 KB stack, where a walk would write below it into the
/// program's heap). Async-signal-safe: one `sigaltstack` query.
#[inline(never)]
pub fn room() -> bool {
    // SAFETY: stack_t is plain data.
    let mut ss: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: a query (no new stack), into a valid out-pointer; async-signal-safe.
    if unsafe { libc::sigaltstack(core::ptr::null(), &mut ss) } != 0 {
        return true;
    }
    if ss.ss_flags & libc::SS_ONSTACK == 0 {
        return true;
    }
    let here = &ss as *const libc::stack_t as usize;
    here.saturating_sub(ss.ss_sp as usize) >= STACK_NEEDED
}

/// Python frames on this thread's stack now (0 without Python, or if the walk failed or
/// was cut at the depth limit).
pub fn depth() -> u32 {
    if !room() {
        return 0;
    }
    let Some(rt) = runtime::get() else { return 0 };
    let tstate = rt.this_thread_state();
    if tstate == 0 {
        return 0;
    }
    let mut frames = [walk::Frame::default(); MAX_DEPTH];
    let w = walk::walk(
        &read::Windowed::new(),
        &rt.interpreter(),
        tstate,
        &mut frames,
    );
    if w.truncated || w.failed {
        0
    } else {
        w.depth as u32
    }
}

/// Send the head record `head(tid, ts_ns, stack)` makes, followed by this thread's Python
/// frames.
pub fn send(reads: Reads, head: impl FnOnce(u32, u64, Stack) -> Record) {
    if !room() {
        return;
    }
    match reads {
        Reads::Checked => send_with(&read::Windowed::new(), head),
        Reads::Trusted => send_with(&read::Trusted, head),
    }
}

#[inline(never)]
fn send_with<M: Memory>(mem: &M, head: impl FnOnce(u32, u64, Stack) -> Record) {
    let Some(ring) = channel::ring() else { return };
    let mut frames = [walk::Frame::default(); MAX_DEPTH];
    let rt = runtime::get_or_check();
    let mut stack = Stack {
        tstate: rt.map_or(0, |rt| rt.this_thread_state()),
        ..Stack::default()
    };
    match rt {
        Some(rt) if stack.tstate != 0 => {
            let w = walk::walk_ends(
                mem,
                &rt.interpreter(),
                stack.tstate,
                &mut frames,
                walk::OUTER_FRAMES,
                walk::WALK_LIMIT,
            );
            stack.depth = w.depth.min(MAX_DEPTH); // never more than it was given room for
            stack.flags |= if w.truncated {
                sample_flags::TRUNCATED
            } else {
                0
            };
            stack.flags |= if w.failed {
                sample_flags::WALK_FAILED
            } else {
                0
            };
        }
        _ => stack.flags |= sample_flags::NO_PYTHON,
    }
    let mut sent = [Frame::default(); MAX_DEPTH];
    for (out, frame) in sent.iter_mut().zip(&frames).take(stack.depth) {
        let code_id = rt.map_or(UNKNOWN_CODE, |rt| codes::id(mem, &rt, &ring, frame.code));
        *out = Frame {
            code_id,
            lasti: frame.lasti,
        };
    }
    let frame_records = stack.depth.div_ceil(FRAMES_PER_RECORD);
    let Some(group) = ring.reserve(1 + frame_records as u64) else {
        return;
    };
    let tid = clock::tid();
    group.set(0, &head(tid, clock::monotonic_ns(), stack));
    let sent = sent.get(..stack.depth).unwrap_or_default();
    for (i, chunk) in sent.chunks(FRAMES_PER_RECORD).enumerate() {
        group.set(1 + i as u64, &Record::frames(tid, chunk));
    }
}
