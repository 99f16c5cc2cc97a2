//! The one home of CPython version knowledge: a [`Layout`] per build mlprof reads (x86_64
//! Linux, CPython 3.9-3.15, and the free-threaded builds 3.13t-3.15t), each carrying its
//! struct offsets, how its frames are walked, its line-table format and where its
//! `_Py_DebugOffsets` keeps what it publishes (`offsets.rs`). Every list of supported versions
//! (messages, tests, the collector's gates) is read from [`ALL`].
//!
//! Plain data: no dependencies, only `core` types, nothing that allocates, so it can be used
//! from the signal handler.
//!
//! # Where the numbers come from
//!
//! Every number in `versions.rs` was produced by `pyframes/layouts-derivation/derive.sh`,
//! which compiles `derive.c` against each CPython's headers (with `Py_BUILD_CORE`, so the
//! `internal/` headers are reachable) and prints `offsetof(...)` / `sizeof(...)` as
//! `name=value` lines; on 3.13+ it also compares them with the running interpreter's own
//! `_Py_DebugOffsets`. Its output is kept in `layouts-derivation/expected.txt`; the tests in
//! `tests.rs` read that file and fail if any value here differs from it. `derive.sh --check`
//! re-derives and diffs against it. Headers: pyenv CPython 3.9.18, 3.10.13, 3.11.7, 3.12.1,
//! 3.13.0, a free-threaded 3.13.5 build, and Debian's 3.14.10 and 3.15.2 (whose headers also
//! give the free-threaded 3.14t/3.15t layouts, with `Py_GIL_DISABLED`; no such interpreter
//! has run them, so they are walked only behind the self-check of `check.rs`).
//!
//! At run time, 3.13+ take every offset `_Py_DebugOffsets` carries from the interpreter
//! itself ([`offsets::layout`]); the table is the cross-check and gives what it does not
//! carry. Refused: debug (`Py_TRACE_REFS`) builds and versions before 3.9
//! (`docs/design/python-layouts.md`).
//!
//! # Finding compact string data
//!
//! `PyASCIIObject.state` (at [`Layout::unicode_state`]) is a 32-bit bitfield word: `interned`,
//! `kind` (3 bits), `compact`, `ascii`. The bits are at 0-1, 2-4, 5, 6 in 3.9-3.15, except in
//! free-threaded 3.14+, where `interned` is a whole byte and the rest move up by 6
//! ([`Layout::unicode_kind_shift`] and the two bit fields). A compact string's data follows
//! its header: [`Layout::ascii_object_size`] bytes for ASCII, [`Layout::compact_object_size`]
//! otherwise.

mod offsets;
#[cfg(test)]
mod tests;
mod versions;

pub use offsets::{
    from_table, layout, DebugSpec, Field, Refusal, Source, Struct, COOKIE, DEBUG_313, DEBUG_314,
    DEBUG_315, FREE_THREADED, MAX_SIZE, VERSION,
};
pub use versions::*;

/// How the walker reaches the innermost frame of a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// 3.9 / 3.10: `PyFrameObject *` in `tstate->frame`, linked by `f_back`.
    Legacy,
    /// 3.11 / 3.12: `tstate->cframe` (a `_PyCFrame *`) `->current_frame`, a
    /// `_PyInterpreterFrame *`, linked by `previous`.
    Cframe,
    /// 3.13+: `_PyInterpreterFrame *` directly in `tstate->current_frame`.
    Direct,
}

/// What [`Layout::frame_instr`] holds and how to turn it into a bytecode offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstrKind {
    /// 3.9: `int f_lasti`, a byte offset into `co_code` (-1 before the first instruction).
    LastiBytes,
    /// 3.10: `int f_lasti`, in code units (multiply by [`CODE_UNIT_SIZE`]).
    LastiCodeUnits,
    /// 3.11 / 3.12: `_Py_CODEUNIT *prev_instr`; lasti in code units is
    /// `(prev_instr - (code + code_adaptive)) / CODE_UNIT_SIZE`.
    PrevInstr,
    /// 3.13+: `_Py_CODEUNIT *instr_ptr`; same arithmetic as `PrevInstr` (from the frame's
    /// thread-local copy of the bytecode on free-threaded 3.14+).
    InstrPtr,
}

/// How a code object's line table is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTable {
    /// 3.9: `co_lnotab`, (byte offset delta, line delta) pairs.
    Lnotab39,
    /// 3.10: PEP 626 `co_linetable`, (code-unit delta, line delta) pairs.
    Lnotab310,
    /// 3.11+: the PEP 657 location table (varint entries); unchanged through 3.15.
    Locations311,
}

impl FrameKind {
    /// The variant's name, as derive.sh prints it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            FrameKind::Legacy => "Legacy",
            FrameKind::Cframe => "Cframe",
            FrameKind::Direct => "Direct",
        }
    }
}

impl InstrKind {
    /// The variant's name, as derive.sh prints it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            InstrKind::LastiBytes => "LastiBytes",
            InstrKind::LastiCodeUnits => "LastiCodeUnits",
            InstrKind::PrevInstr => "PrevInstr",
            InstrKind::InstrPtr => "InstrPtr",
        }
    }
}

impl LineTable {
    /// The variant's name, as derive.sh prints it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            LineTable::Lnotab39 => "Lnotab39",
            LineTable::Lnotab310 => "Lnotab310",
            LineTable::Locations311 => "Locations311",
        }
    }
}

/// Where mimalloc (the allocator of free-threaded builds) keeps a block's size: the block's
/// 32 MiB-aligned segment holds one slice entry per 64 KiB; the entry of the slice a block is
/// in points back (`slice_offset` bytes) to its page's entry, which holds the page's block
/// size (`mi_usable_size` reads the same). Offsets from CPython's vendored mimalloc headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mimalloc {
    /// `MI_SEGMENT_SHIFT`: segments are `1 << segment_shift` bytes, aligned to that.
    pub segment_shift: u8,
    /// `MI_SEGMENT_SLICE_SHIFT`.
    pub slice_shift: u8,
    /// `offsetof(mi_segment_t, slices)`.
    pub segment_slices: usize,
    /// Entries of `mi_segment_t.slices`.
    pub slices_per_segment: usize,
    /// `sizeof(mi_slice_t)` (= `sizeof(mi_page_t)`).
    pub slice_size: usize,
    /// `offsetof(mi_page_t, slice_offset)` (a `uint32_t`).
    pub page_slice_offset: usize,
    /// `offsetof(mi_page_t, xblock_size)` (3.13, a `uint32_t`) or `block_size` (3.14+).
    pub page_block_size: usize,
    /// Bytes of that block-size field (4 or 8).
    pub block_size_bytes: u8,
}

/// Byte offsets (x86_64) of everything the frame walker reads, for one CPython build.
/// `None` means the field does not exist in that build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub major: u8,
    pub minor: u8,
    /// A free-threaded (`Py_GIL_DISABLED`) build: 32-byte object header, mimalloc.
    pub free_threaded: bool,
    pub frame_kind: FrameKind,
    pub instr_kind: InstrKind,
    /// How its code objects' line tables are encoded.
    pub line_table: LineTable,

    // ---- PyThreadState ----
    /// 3.9/3.10 `offsetof(PyThreadState, frame)`; 3.11/3.12 `offsetof(PyThreadState,
    /// cframe)` (a `_PyCFrame *`, follow it and add `cframe_current_frame`); 3.13+
    /// `offsetof(PyThreadState, current_frame)`.
    pub tstate_frame: usize,
    /// `offsetof(_PyCFrame, current_frame)`, meaningful only for [`FrameKind::Cframe`] (8 on
    /// 3.11, 0 on 3.12); 0 for other kinds.
    pub cframe_current_frame: usize,
    /// `offsetof(PyThreadState, native_thread_id)` (the kernel TID, an `unsigned long`),
    /// 3.11+.
    pub tstate_native_thread_id: Option<usize>,
    /// `offsetof(PyThreadState, base_frame)`, 3.15+: a pointer to the sentinel frame every
    /// chain ends in (embedded in `_PyThreadStateImpl`).
    pub tstate_base_frame: Option<usize>,
    /// `offsetof(PyThreadState, next)`: the interpreter's thread list.
    pub tstate_next: usize,
    /// `offsetof(PyThreadState, thread_id)` (`pthread_self()` of the thread).
    pub tstate_thread_id: usize,
    /// `offsetof(_PyRuntimeState, interpreters.head)` (from the `_PyRuntime` symbol).
    pub runtime_interpreters_head: usize,
    /// `offsetof(PyInterpreterState, tstate_head)` (3.9/3.10) or `threads.head` (3.11+).
    pub interp_threads_head: usize,

    // ---- frame (PyFrameObject on 3.9/3.10, _PyInterpreterFrame after) ----
    /// `f_back` (3.9/3.10) or `previous` (3.11+).
    pub frame_back: usize,
    /// `f_code` (3.9-3.12) or `f_executable` (3.13+: may be a non-code object, and from 3.14
    /// a `_PyStackRef` whose low bits [`Layout::executable_tag_mask`] are a tag).
    pub frame_code: usize,
    /// `f_lasti` (an `int`, 3.9/3.10) or `prev_instr` (3.11/3.12) / `instr_ptr` (3.13+),
    /// both `_Py_CODEUNIT *`. See [`InstrKind`].
    pub frame_instr: usize,
    /// `offsetof(_PyInterpreterFrame, owner)`, a one-byte `char`, 3.11+.
    pub frame_owner: Option<usize>,
    /// `offsetof(_PyInterpreterFrame, is_entry)`, a one-byte `bool`, 3.11 only (3.12+ mark
    /// entry frames by their owner).
    pub frame_is_entry: Option<usize>,
    /// 3.12+: frames whose owner is this value or more are not Python frames
    /// (`FRAME_OWNED_BY_CSTACK`, 3, on 3.12/3.13: the entry frame a call from C pushes;
    /// `FRAME_OWNED_BY_INTERPRETER`, also 3, on 3.14+: that frame and 3.15's base frame).
    pub owner_shim: Option<u8>,
    /// `offsetof(_PyInterpreterFrame, tlbc_index)` (an `int32_t`), free-threaded 3.14+.
    pub frame_tlbc_index: Option<usize>,

    // ---- any object ----
    /// `offsetof(PyObject, ob_type)`: 8, or 24 in free-threaded builds.
    pub object_type: usize,
    /// Tag bits of a `_PyStackRef` (3.14+; 0 before): the object is `bits & !mask`.
    pub executable_tag_mask: usize,

    // ---- PyCodeObject ----
    /// `offsetof(PyCodeObject, co_filename)` (a `str`).
    pub code_filename: usize,
    /// `offsetof(PyCodeObject, co_name)` (a `str`).
    pub code_name: usize,
    /// `offsetof(PyCodeObject, co_qualname)` (a `str`), 3.11+.
    pub code_qualname: Option<usize>,
    /// `offsetof(PyCodeObject, co_firstlineno)` (an `int`).
    pub code_firstlineno: usize,
    /// `offsetof(PyCodeObject, co_lnotab)` on 3.9, `co_linetable` after (a `bytes`, encoded
    /// as [`Layout::line_table`] says).
    pub code_linetable: usize,
    /// `offsetof(PyCodeObject, co_code)` (a `bytes` holding the bytecode), 3.9/3.10.
    pub code_code: Option<usize>,
    /// `offsetof(PyCodeObject, co_code_adaptive)`: the bytecode is inline in the code object
    /// from here (`_PyCode_CODE(co)`), 3.11+.
    pub code_adaptive: Option<usize>,
    /// `offsetof(PyCodeObject, _co_firsttraceable)` (an `int`, in code units), 3.11+.
    /// Frames with `lasti < _co_firsttraceable` are incomplete.
    pub code_firsttraceable: Option<usize>,
    /// `offsetof(PyCodeObject, co_tlbc)` (a `_PyCodeArray *`), free-threaded 3.14+.
    pub code_tlbc: Option<usize>,
    /// `offsetof(_PyCodeArray, entries)` (after its `Py_ssize_t size`), free-threaded 3.14+.
    pub code_array_entries: Option<usize>,

    // ---- bytes / str ----
    /// `offsetof(PyBytesObject, ob_base.ob_size)` (`Py_ssize_t` length; the same place holds
    /// every variable-size object's `ob_size`, a code object's length in code units too).
    pub bytes_size: usize,
    /// `offsetof(PyBytesObject, ob_sval)` (the data).
    pub bytes_data: usize,
    /// `sizeof(PyASCIIObject)`: compact-ASCII string data starts here.
    pub ascii_object_size: usize,
    /// `sizeof(PyCompactUnicodeObject)`: other compact strings' data starts here.
    pub compact_object_size: usize,
    /// `offsetof(PyASCIIObject, length)` (`Py_ssize_t`, code points).
    pub unicode_length: usize,
    /// `offsetof(PyASCIIObject, state)` (a 32-bit bitfield word).
    pub unicode_state: usize,
    /// Bit of `state.compact` in that word.
    pub unicode_compact_bit: u8,
    /// Bit of `state.ascii` in that word.
    pub unicode_ascii_bit: u8,
    /// First bit of the 3-bit `state.kind` (1, 2 or 4 bytes per character).
    pub unicode_kind_shift: u8,

    /// Where mimalloc keeps block sizes (free-threaded builds, whose Python objects it
    /// serves).
    pub mimalloc: Option<Mimalloc>,
    /// Where this minor's `_Py_DebugOffsets` keeps what it carries (3.13+).
    pub debug: Option<&'static DebugSpec>,
}

/// Mask of `kind` after shifting by [`Layout::unicode_kind_shift`].
pub const UNICODE_STATE_KIND_MASK: u32 = 0b111;
/// `sizeof(_Py_CODEUNIT)`, 3.9-3.15.
pub const CODE_UNIT_SIZE: usize = 2;
/// `FRAME_OWNED_BY_GENERATOR`, 3.11-3.15 (generator frames are never "incomplete").
pub const OWNER_GENERATOR: u8 = 1;

/// Every known layout: the GIL builds oldest first, then the free-threaded ones.
pub const ALL: [&Layout; 10] = [
    &PY39, &PY310, &PY311, &PY312, &PY313, &PY314, &PY315, &PY313T, &PY314T, &PY315T,
];

/// The layout of CPython `major.minor`'s default (GIL) build, or `None` if that version is
/// not known.
#[must_use]
pub fn for_version(major: u8, minor: u8) -> Option<&'static Layout> {
    if major != 3 {
        return None;
    }
    for_build(minor, false)
}

/// The layout of CPython 3.`minor`, free-threaded or not.
#[must_use]
pub fn for_build(minor: u8, free_threaded: bool) -> Option<&'static Layout> {
    ALL.iter()
        .copied()
        .find(|l| l.minor == minor && l.free_threaded == free_threaded)
}

/// The newest known minor's GIL build.
#[must_use]
pub fn newest() -> &'static Layout {
    ALL.iter()
        .copied()
        .filter(|l| !l.free_threaded)
        .max_by_key(|l| l.minor)
        .unwrap_or(&PY313)
}

/// The oldest known minor.
#[must_use]
pub fn oldest() -> &'static Layout {
    ALL.iter().copied().min_by_key(|l| l.minor).unwrap_or(&PY39)
}

/// The oldest minor with a free-threaded build.
#[must_use]
pub fn oldest_free_threaded() -> &'static Layout {
    ALL.iter()
        .copied()
        .filter(|l| l.free_threaded)
        .min_by_key(|l| l.minor)
        .unwrap_or(&PY313T)
}

impl Layout {
    /// `3.14` or `3.14t`, written into `out`; the text's length.
    pub fn name(&self, out: &mut [u8; 8]) -> usize {
        let mut n = 0;
        let mut push = |b: u8| {
            if let Some(slot) = out.get_mut(n) {
                *slot = b;
                n += 1;
            }
        };
        push(b'0' + self.major % 10);
        push(b'.');
        if self.minor >= 10 {
            push(b'0' + self.minor / 10 % 10);
        }
        push(b'0' + self.minor % 10);
        if self.free_threaded {
            push(b't');
        }
        n
    }
}
