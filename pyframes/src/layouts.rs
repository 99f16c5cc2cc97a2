//! Per-version CPython 3.9-3.13 struct offsets (x86_64 Linux) for the in-process frame walker.
//!
//! This module is plain data: no dependencies, only `core` types, nothing
//! that allocates, so it can be used from the signal handler.
//!
//! # Where the numbers come from
//!
//! Every number below was produced by `pyframes/layouts-derivation/derive.sh`,
//! which compiles `pyframes/layouts-derivation/derive.c` against each installed
//! CPython's headers (with `Py_BUILD_CORE`, so the `internal/` headers are
//! reachable) and prints `offsetof(...)` / `sizeof(...)` as `name=value`
//! lines. Its output is kept in `pyframes/layouts-derivation/expected.txt`; the
//! tests at the bottom of this file read that file and fail if any value here
//! differs from it. `derive.sh --check` re-derives and diffs against it.
//! The headers used were those of pyenv CPython 3.9.18, 3.10.13, 3.11.7,
//! 3.12.1 and 3.13.0 (default GIL, non-debug, `--enable-shared` builds).
//!
//! Offsets are keyed by minor version only. CPython keeps these structs
//! stable within a minor release (py-spy and Austin rely on the same thing),
//! but nothing enforces it before 3.13. For 3.13 the interpreter publishes
//! its own offsets in `_Py_DebugOffsets` at the start of `_PyRuntime`; the
//! walker must compare them against [`PY313`] at run time before trusting the
//! table (see [`debug_offsets_313`], and `layouts-derivation/debug_offsets.py`
//! for a script that prints them).
//!
//! Refused (no layout here; see `docs/design/python-layouts.md`):
//! free-threaded (`Py_GIL_DISABLED`) builds, `Py_TRACE_REFS` / debug builds,
//! and every version other than 3.9-3.13.
//!
//! # Finding compact-ASCII string data
//!
//! `PyASCIIObject.state` (at [`Layout::unicode_state`]) is a 32-bit bitfield
//! word. Its bit positions are the same in 3.9-3.13 (checked by derive.c):
//! `interned` bits 0-1, `kind` bits 2-4, `compact` bit 5, `ascii` bit 6 (3.9-3.11
//! have `ready` at bit 7; 3.12/3.13 have `statically_allocated` there). A
//! string with both `compact` and `ascii` set stores its
//! [`Layout::unicode_length`] bytes of ASCII right after the header, at
//! `obj + ascii_object_size`. Anything else (latin-1, UCS-2/4, legacy
//! non-compact) needs a different path or is skipped.

/// How the walker reaches the innermost frame of a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// 3.9 / 3.10: `PyFrameObject *` in `tstate->frame`, linked by `f_back`.
    Legacy,
    /// 3.11 / 3.12: `tstate->cframe` (a `_PyCFrame *`) `->current_frame`, a
    /// `_PyInterpreterFrame *`, linked by `previous`.
    Cframe,
    /// 3.13: `_PyInterpreterFrame *` directly in `tstate->current_frame`.
    Direct,
}

/// What [`Layout::frame_instr`] holds and how to turn it into a bytecode offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstrKind {
    /// 3.9: `int f_lasti`, a byte offset into `co_code` (-1 before the first
    /// instruction).
    LastiBytes,
    /// 3.10: `int f_lasti`, in code units (multiply by [`CODE_UNIT_SIZE`]).
    LastiCodeUnits,
    /// 3.11 / 3.12: `_Py_CODEUNIT *prev_instr`; lasti in code units is
    /// `(prev_instr - (code + code_adaptive)) / CODE_UNIT_SIZE`.
    PrevInstr,
    /// 3.13: `_Py_CODEUNIT *instr_ptr`; same arithmetic as `PrevInstr`.
    InstrPtr,
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

/// Byte offsets (x86_64) of everything the frame walker reads, for one
/// CPython minor version. `None` means the field does not exist in that
/// version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub major: u8,
    pub minor: u8,
    pub frame_kind: FrameKind,
    pub instr_kind: InstrKind,

    // ---- PyThreadState ----
    /// 3.9/3.10 `offsetof(PyThreadState, frame)`; 3.11/3.12
    /// `offsetof(PyThreadState, cframe)` (a `_PyCFrame *`, follow it and add
    /// `cframe_current_frame`); 3.13 `offsetof(PyThreadState, current_frame)`.
    pub tstate_frame: usize,
    /// `offsetof(_PyCFrame, current_frame)`, meaningful only for
    /// [`FrameKind::Cframe`] (8 on 3.11, 0 on 3.12); 0 for other kinds.
    pub cframe_current_frame: usize,
    /// `offsetof(PyThreadState, native_thread_id)` (the kernel TID, an
    /// `unsigned long`), 3.11+.
    pub tstate_native_thread_id: Option<usize>,

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
    /// `f_code` (3.9-3.12) or `f_executable` (3.13, may be a non-code object:
    /// check `ob_type == &PyCode_Type`).
    pub frame_code: usize,
    /// `f_lasti` (an `int`, 3.9/3.10) or `prev_instr` (3.11/3.12) /
    /// `instr_ptr` (3.13), both `_Py_CODEUNIT *`. See [`InstrKind`].
    pub frame_instr: usize,
    /// `offsetof(_PyInterpreterFrame, owner)`, a one-byte `char`, 3.11+.
    pub frame_owner: Option<usize>,
    /// `offsetof(_PyInterpreterFrame, is_entry)`, a one-byte `bool`, 3.11
    /// only (3.12+ marks entry frames with `owner == FRAME_OWNED_BY_CSTACK`).
    pub frame_is_entry: Option<usize>,
    /// Value of `FRAME_OWNED_BY_CSTACK` (shim/entry frames to skip), 3.12+.
    pub owner_cstack: Option<u8>,

    // ---- PyCodeObject ----
    /// `offsetof(PyCodeObject, co_filename)` (a `str`).
    pub code_filename: usize,
    /// `offsetof(PyCodeObject, co_name)` (a `str`).
    pub code_name: usize,
    /// `offsetof(PyCodeObject, co_qualname)` (a `str`), 3.11+.
    pub code_qualname: Option<usize>,
    /// `offsetof(PyCodeObject, co_firstlineno)` (an `int`).
    pub code_firstlineno: usize,
    /// `offsetof(PyCodeObject, co_lnotab)` on 3.9, `co_linetable` after (a
    /// `bytes`; the format differs per version: lnotab, PEP 626, PEP 657).
    pub code_linetable: usize,
    /// `offsetof(PyCodeObject, co_code)` (a `bytes` holding the bytecode),
    /// 3.9/3.10.
    pub code_code: Option<usize>,
    /// `offsetof(PyCodeObject, co_code_adaptive)`: the bytecode is inline in
    /// the code object from here (`_PyCode_CODE(co)`), 3.11+.
    pub code_adaptive: Option<usize>,
    /// `offsetof(PyCodeObject, _co_firsttraceable)` (an `int`, in code units),
    /// 3.11+. Frames with `lasti < _co_firsttraceable` are incomplete.
    pub code_firsttraceable: Option<usize>,

    // ---- bytes / str ----
    /// `offsetof(PyBytesObject, ob_base.ob_size)` (`Py_ssize_t` length).
    pub bytes_size: usize,
    /// `offsetof(PyBytesObject, ob_sval)` (the data).
    pub bytes_data: usize,
    /// `sizeof(PyASCIIObject)`: compact-ASCII string data starts here.
    pub ascii_object_size: usize,
    /// `offsetof(PyASCIIObject, length)` (`Py_ssize_t`, code points).
    pub unicode_length: usize,
    /// `offsetof(PyASCIIObject, state)` (a 32-bit bitfield word, see
    /// [`UNICODE_STATE_COMPACT_BIT`], [`UNICODE_STATE_ASCII_BIT`]).
    pub unicode_state: usize,
}

/// Bit of `PyASCIIObject.state.compact` in the 32-bit state word (3.9-3.13).
pub const UNICODE_STATE_COMPACT_BIT: u32 = 5;
/// Bit of `PyASCIIObject.state.ascii` in the 32-bit state word (3.9-3.13).
pub const UNICODE_STATE_ASCII_BIT: u32 = 6;
/// First bit of the 3-bit `PyASCIIObject.state.kind` (1, 2 or 4 bytes per
/// character; 0 is the pre-3.12 `PyUnicode_WCHAR_KIND`), 3.9-3.13.
pub const UNICODE_STATE_KIND_SHIFT: u32 = 2;
/// Mask of `kind` after shifting by [`UNICODE_STATE_KIND_SHIFT`].
pub const UNICODE_STATE_KIND_MASK: u32 = 0b111;
/// `sizeof(_Py_CODEUNIT)`, 3.9-3.13.
pub const CODE_UNIT_SIZE: usize = 2;
/// `FRAME_OWNED_BY_GENERATOR`, 3.11-3.13 (generator frames are never
/// "incomplete").
pub const OWNER_GENERATOR: u8 = 1;

/// CPython 3.9 (from 3.9.18 headers).
pub const PY39: Layout = Layout {
    major: 3,
    minor: 9,
    frame_kind: FrameKind::Legacy,
    instr_kind: InstrKind::LastiBytes,
    tstate_frame: 24,              // offsetof(PyThreadState, frame)
    cframe_current_frame: 0,       // (no _PyCFrame)
    tstate_native_thread_id: None, // (no native_thread_id)
    tstate_next: 8,
    tstate_thread_id: 176,
    runtime_interpreters_head: 32,
    interp_threads_head: 8,
    frame_back: 24,   // offsetof(PyFrameObject, f_back)
    frame_code: 32,   // offsetof(PyFrameObject, f_code)
    frame_instr: 104, // offsetof(PyFrameObject, f_lasti)
    frame_owner: None,
    frame_is_entry: None,
    owner_cstack: None,
    code_filename: 104,   // offsetof(PyCodeObject, co_filename)
    code_name: 112,       // offsetof(PyCodeObject, co_name)
    code_qualname: None,  // (no co_qualname)
    code_firstlineno: 40, // offsetof(PyCodeObject, co_firstlineno)
    code_linetable: 120,  // offsetof(PyCodeObject, co_lnotab)
    code_code: Some(48),  // offsetof(PyCodeObject, co_code)
    code_adaptive: None,
    code_firsttraceable: None,
    bytes_size: 16,        // offsetof(PyBytesObject, ob_base.ob_size)
    bytes_data: 32,        // offsetof(PyBytesObject, ob_sval)
    ascii_object_size: 48, // sizeof(PyASCIIObject)
    unicode_length: 16,    // offsetof(PyASCIIObject, length)
    unicode_state: 32,     // offsetof(PyASCIIObject, state)
};

/// CPython 3.10 (from 3.10.13 headers).
pub const PY310: Layout = Layout {
    major: 3,
    minor: 10,
    frame_kind: FrameKind::Legacy,
    instr_kind: InstrKind::LastiCodeUnits,
    tstate_frame: 24,              // offsetof(PyThreadState, frame)
    cframe_current_frame: 0,       // (no _PyCFrame)
    tstate_native_thread_id: None, // (no native_thread_id)
    tstate_next: 8,
    tstate_thread_id: 176,
    runtime_interpreters_head: 32,
    interp_threads_head: 8,
    frame_back: 24,  // offsetof(PyFrameObject, f_back)
    frame_code: 32,  // offsetof(PyFrameObject, f_code)
    frame_instr: 96, // offsetof(PyFrameObject, f_lasti)
    frame_owner: None,
    frame_is_entry: None,
    owner_cstack: None,
    code_filename: 104,   // offsetof(PyCodeObject, co_filename)
    code_name: 112,       // offsetof(PyCodeObject, co_name)
    code_qualname: None,  // (no co_qualname)
    code_firstlineno: 40, // offsetof(PyCodeObject, co_firstlineno)
    code_linetable: 120,  // offsetof(PyCodeObject, co_linetable)
    code_code: Some(48),  // offsetof(PyCodeObject, co_code)
    code_adaptive: None,
    code_firsttraceable: None,
    bytes_size: 16,        // offsetof(PyBytesObject, ob_base.ob_size)
    bytes_data: 32,        // offsetof(PyBytesObject, ob_sval)
    ascii_object_size: 48, // sizeof(PyASCIIObject)
    unicode_length: 16,    // offsetof(PyASCIIObject, length)
    unicode_state: 32,     // offsetof(PyASCIIObject, state)
};

/// CPython 3.11 (from 3.11.7 headers).
pub const PY311: Layout = Layout {
    major: 3,
    minor: 11,
    frame_kind: FrameKind::Cframe,
    instr_kind: InstrKind::PrevInstr,
    tstate_frame: 56,                   // offsetof(PyThreadState, cframe)
    cframe_current_frame: 8,            // offsetof(_PyCFrame, current_frame)
    tstate_native_thread_id: Some(160), // offsetof(PyThreadState, native_thread_id)
    tstate_next: 8,
    tstate_thread_id: 152,
    runtime_interpreters_head: 40,
    interp_threads_head: 16,
    frame_back: 48,                 // offsetof(_PyInterpreterFrame, previous)
    frame_code: 32,                 // offsetof(_PyInterpreterFrame, f_code)
    frame_instr: 56,                // offsetof(_PyInterpreterFrame, prev_instr)
    frame_owner: Some(69),          // offsetof(_PyInterpreterFrame, owner)
    frame_is_entry: Some(68),       // offsetof(_PyInterpreterFrame, is_entry)
    owner_cstack: None,             // (no FRAME_OWNED_BY_CSTACK; use is_entry)
    code_filename: 112,             // offsetof(PyCodeObject, co_filename)
    code_name: 120,                 // offsetof(PyCodeObject, co_name)
    code_qualname: Some(128),       // offsetof(PyCodeObject, co_qualname)
    code_firstlineno: 72,           // offsetof(PyCodeObject, co_firstlineno)
    code_linetable: 136,            // offsetof(PyCodeObject, co_linetable)
    code_code: None,                // (bytecode is inline: code_adaptive)
    code_adaptive: Some(184),       // offsetof(PyCodeObject, co_code_adaptive)
    code_firsttraceable: Some(168), // offsetof(PyCodeObject, _co_firsttraceable)
    bytes_size: 16,                 // offsetof(PyBytesObject, ob_base.ob_size)
    bytes_data: 32,                 // offsetof(PyBytesObject, ob_sval)
    ascii_object_size: 48,          // sizeof(PyASCIIObject)
    unicode_length: 16,             // offsetof(PyASCIIObject, length)
    unicode_state: 32,              // offsetof(PyASCIIObject, state)
};

/// CPython 3.12 (from 3.12.1 headers).
pub const PY312: Layout = Layout {
    major: 3,
    minor: 12,
    frame_kind: FrameKind::Cframe,
    instr_kind: InstrKind::PrevInstr,
    tstate_frame: 56,                   // offsetof(PyThreadState, cframe)
    cframe_current_frame: 0,            // offsetof(_PyCFrame, current_frame) (use_tracing is gone)
    tstate_native_thread_id: Some(144), // offsetof(PyThreadState, native_thread_id)
    tstate_next: 8,
    tstate_thread_id: 136,
    runtime_interpreters_head: 40,
    interp_threads_head: 72,
    frame_back: 8,                  // offsetof(_PyInterpreterFrame, previous)
    frame_code: 0,                  // offsetof(_PyInterpreterFrame, f_code)
    frame_instr: 56,                // offsetof(_PyInterpreterFrame, prev_instr)
    frame_owner: Some(70),          // offsetof(_PyInterpreterFrame, owner)
    frame_is_entry: None,           // (gone; owner == FRAME_OWNED_BY_CSTACK)
    owner_cstack: Some(3),          // FRAME_OWNED_BY_CSTACK
    code_filename: 112,             // offsetof(PyCodeObject, co_filename)
    code_name: 120,                 // offsetof(PyCodeObject, co_name)
    code_qualname: Some(128),       // offsetof(PyCodeObject, co_qualname)
    code_firstlineno: 68,           // offsetof(PyCodeObject, co_firstlineno)
    code_linetable: 136,            // offsetof(PyCodeObject, co_linetable)
    code_code: None,                // (bytecode is inline: code_adaptive)
    code_adaptive: Some(192),       // offsetof(PyCodeObject, co_code_adaptive)
    code_firsttraceable: Some(176), // offsetof(PyCodeObject, _co_firsttraceable)
    bytes_size: 16,                 // offsetof(PyBytesObject, ob_base.ob_size)
    bytes_data: 32,                 // offsetof(PyBytesObject, ob_sval)
    ascii_object_size: 40,          // sizeof(PyASCIIObject) (wstr removed in 3.12)
    unicode_length: 16,             // offsetof(PyASCIIObject, length)
    unicode_state: 32,              // offsetof(PyASCIIObject, state)
};

/// CPython 3.13 (from 3.13.0 headers; also checked against the running
/// interpreter's `_Py_DebugOffsets`, see [`debug_offsets_313`]).
pub const PY313: Layout = Layout {
    major: 3,
    minor: 13,
    frame_kind: FrameKind::Direct,
    instr_kind: InstrKind::InstrPtr,
    tstate_frame: 72,                   // offsetof(PyThreadState, current_frame)
    cframe_current_frame: 0,            // (no _PyCFrame)
    tstate_native_thread_id: Some(160), // offsetof(PyThreadState, native_thread_id)
    tstate_next: 8,
    tstate_thread_id: 152,
    runtime_interpreters_head: 632,
    interp_threads_head: 7344,
    frame_back: 8,                  // offsetof(_PyInterpreterFrame, previous)
    frame_code: 0,                  // offsetof(_PyInterpreterFrame, f_executable)
    frame_instr: 56,                // offsetof(_PyInterpreterFrame, instr_ptr)
    frame_owner: Some(70),          // offsetof(_PyInterpreterFrame, owner)
    frame_is_entry: None,           // (gone; owner == FRAME_OWNED_BY_CSTACK)
    owner_cstack: Some(3),          // FRAME_OWNED_BY_CSTACK
    code_filename: 112,             // offsetof(PyCodeObject, co_filename)
    code_name: 120,                 // offsetof(PyCodeObject, co_name)
    code_qualname: Some(128),       // offsetof(PyCodeObject, co_qualname)
    code_firstlineno: 68,           // offsetof(PyCodeObject, co_firstlineno)
    code_linetable: 136,            // offsetof(PyCodeObject, co_linetable)
    code_code: None,                // (bytecode is inline: code_adaptive)
    code_adaptive: Some(200),       // offsetof(PyCodeObject, co_code_adaptive)
    code_firsttraceable: Some(184), // offsetof(PyCodeObject, _co_firsttraceable)
    bytes_size: 16,                 // offsetof(PyBytesObject, ob_base.ob_size)
    bytes_data: 32,                 // offsetof(PyBytesObject, ob_sval)
    ascii_object_size: 40,          // sizeof(PyASCIIObject)
    unicode_length: 16,             // offsetof(PyASCIIObject, length)
    unicode_state: 32,              // offsetof(PyASCIIObject, state)
};

/// All supported layouts, oldest first.
pub const ALL: [&Layout; 5] = [&PY39, &PY310, &PY311, &PY312, &PY313];

/// The layout for CPython `major.minor`, or `None` if that version is not
/// supported (the caller must then refuse to walk Python frames).
#[must_use]
pub fn for_version(major: u8, minor: u8) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 9) => Some(&PY39),
        (3, 10) => Some(&PY310),
        (3, 11) => Some(&PY311),
        (3, 12) => Some(&PY312),
        (3, 13) => Some(&PY313),
        _ => None,
    }
}

/// Where CPython 3.13 keeps its self-description: `_Py_DebugOffsets`, the
/// first member of `_PyRuntimeState`, so it starts at the address of the
/// exported `_PyRuntime` symbol. Each constant is the byte offset of a member
/// INSIDE `_Py_DebugOffsets` (3.13.0 `internal/pycore_runtime.h`, computed by
/// derive.c as `dbg_<name>`). Every member after `cookie` is a `u64`.
///
/// Run-time check: read `COOKIE.len()` bytes at `_PyRuntime` and compare with
/// [`COOKIE`]; read the `u64` at [`VERSION`] and require
/// `version >> 16 == 0x030d`; require the `u64` at [`FREE_THREADED`] to be 0;
/// then for each entry of [`CHECKS`] require the `u64` at `dbg_offset` to
/// equal `expected`. Any failure means "unknown layout": do not walk.
/// This layout of `_Py_DebugOffsets` is only promised for 3.13.x (3.14 adds
/// members in the middle), so never apply these constants to another minor.
pub mod debug_offsets_313 {
    /// `_Py_Debug_Cookie`, `char cookie[8]` at offset 0 (no NUL).
    pub const COOKIE: &[u8; 8] = b"xdebugpy";
    /// `version` (`PY_VERSION_HEX`).
    pub const VERSION: usize = 8;
    /// `free_threaded` (1 on `Py_GIL_DISABLED` builds).
    pub const FREE_THREADED: usize = 16;
    /// `thread_state.current_frame`.
    pub const THREAD_STATE_CURRENT_FRAME: usize = 184;
    /// `thread_state.native_thread_id`.
    pub const THREAD_STATE_NATIVE_THREAD_ID: usize = 200;
    /// `interpreter_frame.previous`.
    pub const INTERPRETER_FRAME_PREVIOUS: usize = 232;
    /// `interpreter_frame.executable`.
    pub const INTERPRETER_FRAME_EXECUTABLE: usize = 240;
    /// `interpreter_frame.instr_ptr`.
    pub const INTERPRETER_FRAME_INSTR_PTR: usize = 248;
    /// `interpreter_frame.owner`.
    pub const INTERPRETER_FRAME_OWNER: usize = 264;
    /// `code_object.filename`.
    pub const CODE_OBJECT_FILENAME: usize = 280;
    /// `code_object.name`.
    pub const CODE_OBJECT_NAME: usize = 288;
    /// `code_object.qualname`.
    pub const CODE_OBJECT_QUALNAME: usize = 296;
    /// `code_object.linetable`.
    pub const CODE_OBJECT_LINETABLE: usize = 304;
    /// `code_object.firstlineno`.
    pub const CODE_OBJECT_FIRSTLINENO: usize = 312;
    /// `code_object.co_code_adaptive`.
    pub const CODE_OBJECT_CO_CODE_ADAPTIVE: usize = 344;
    /// `bytes_object.ob_size`.
    pub const BYTES_OBJECT_OB_SIZE: usize = 520;
    /// `bytes_object.ob_sval`.
    pub const BYTES_OBJECT_OB_SVAL: usize = 528;
    /// `unicode_object.state`.
    pub const UNICODE_OBJECT_STATE: usize = 544;
    /// `unicode_object.length`.
    pub const UNICODE_OBJECT_LENGTH: usize = 552;
    /// `unicode_object.asciiobject_size`.
    pub const UNICODE_OBJECT_ASCIIOBJECT_SIZE: usize = 560;
    /// `sizeof(_Py_DebugOffsets)` on 3.13.0: bytes to read (or to check are
    /// mapped) at `_PyRuntime`.
    pub const SIZE: usize = 584;

    /// One run-time comparison: the `u64` at `dbg_offset` inside
    /// `_Py_DebugOffsets` must equal `expected` (the value in [`super::PY313`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Check {
        /// Name of the [`super::Layout`] field, for error messages.
        pub field: &'static str,
        pub dbg_offset: usize,
        pub expected: u64,
    }

    const fn some(v: Option<usize>) -> u64 {
        match v {
            Some(v) => v as u64,
            None => u64::MAX, // never the case for PY313's checked fields
        }
    }

    const L: super::Layout = super::PY313;

    /// Everything in [`super::PY313`] that `_Py_DebugOffsets` also describes.
    /// Not covered (no such member): `_co_firsttraceable`, the
    /// `FRAME_OWNED_BY_CSTACK` value, and the `PyASCIIObject.state` bits.
    pub const CHECKS: [Check; 17] = [
        Check {
            field: "tstate_frame",
            dbg_offset: THREAD_STATE_CURRENT_FRAME,
            expected: L.tstate_frame as u64,
        },
        Check {
            field: "tstate_native_thread_id",
            dbg_offset: THREAD_STATE_NATIVE_THREAD_ID,
            expected: some(L.tstate_native_thread_id),
        },
        Check {
            field: "frame_back",
            dbg_offset: INTERPRETER_FRAME_PREVIOUS,
            expected: L.frame_back as u64,
        },
        Check {
            field: "frame_code",
            dbg_offset: INTERPRETER_FRAME_EXECUTABLE,
            expected: L.frame_code as u64,
        },
        Check {
            field: "frame_instr",
            dbg_offset: INTERPRETER_FRAME_INSTR_PTR,
            expected: L.frame_instr as u64,
        },
        Check {
            field: "frame_owner",
            dbg_offset: INTERPRETER_FRAME_OWNER,
            expected: some(L.frame_owner),
        },
        Check {
            field: "code_filename",
            dbg_offset: CODE_OBJECT_FILENAME,
            expected: L.code_filename as u64,
        },
        Check {
            field: "code_name",
            dbg_offset: CODE_OBJECT_NAME,
            expected: L.code_name as u64,
        },
        Check {
            field: "code_qualname",
            dbg_offset: CODE_OBJECT_QUALNAME,
            expected: some(L.code_qualname),
        },
        Check {
            field: "code_linetable",
            dbg_offset: CODE_OBJECT_LINETABLE,
            expected: L.code_linetable as u64,
        },
        Check {
            field: "code_firstlineno",
            dbg_offset: CODE_OBJECT_FIRSTLINENO,
            expected: L.code_firstlineno as u64,
        },
        Check {
            field: "code_adaptive",
            dbg_offset: CODE_OBJECT_CO_CODE_ADAPTIVE,
            expected: some(L.code_adaptive),
        },
        Check {
            field: "bytes_size",
            dbg_offset: BYTES_OBJECT_OB_SIZE,
            expected: L.bytes_size as u64,
        },
        Check {
            field: "bytes_data",
            dbg_offset: BYTES_OBJECT_OB_SVAL,
            expected: L.bytes_data as u64,
        },
        Check {
            field: "ascii_object_size",
            dbg_offset: UNICODE_OBJECT_ASCIIOBJECT_SIZE,
            expected: L.ascii_object_size as u64,
        },
        Check {
            field: "unicode_length",
            dbg_offset: UNICODE_OBJECT_LENGTH,
            expected: L.unicode_length as u64,
        },
        Check {
            field: "unicode_state",
            dbg_offset: UNICODE_OBJECT_STATE,
            expected: L.unicode_state as u64,
        },
    ];
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    /// derive.sh output, the source of truth for every number above.
    const EXPECTED: &str = include_str!("../layouts-derivation/expected.txt");

    /// Value of `name` in section `[major.minor]` of expected.txt.
    fn expected(major: u8, minor: u8, name: &str) -> Option<&'static str> {
        let mut in_section = false;
        for line in EXPECTED.lines() {
            let line = line.trim();
            if let Some(head) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                let mut it = head.split('.');
                let maj = it.next().and_then(|s| s.parse::<u8>().ok());
                let min = it.next().and_then(|s| s.parse::<u8>().ok());
                in_section = maj == Some(major) && min == Some(minor);
                continue;
            }
            if !in_section {
                continue;
            }
            if let Some((k, v)) = line.split_once('=') {
                if k == name {
                    return Some(v);
                }
            }
        }
        None
    }

    fn want_opt(l: &Layout, name: &str) -> Option<usize> {
        let v = expected(l.major, l.minor, name).unwrap_or_else(|| {
            panic!(
                "{}.{}: {} missing from expected.txt",
                l.major, l.minor, name
            )
        });
        if v == "none" {
            None
        } else {
            Some(
                v.parse()
                    .unwrap_or_else(|_| panic!("{}: bad value {:?}", name, v)),
            )
        }
    }

    fn want(l: &Layout, name: &str) -> usize {
        want_opt(l, name).unwrap_or_else(|| panic!("{}.{}: {} is none", l.major, l.minor, name))
    }

    #[test]
    fn for_version_maps_each_supported_minor() {
        for minor in 9..=13u8 {
            let l = for_version(3, minor).expect("supported");
            assert_eq!((l.major, l.minor), (3, minor));
        }
        assert_eq!(for_version(3, 9), Some(&PY39));
        assert_eq!(for_version(3, 13), Some(&PY313));
        for (major, minor) in [(3, 8), (3, 14), (3, 15), (2, 7), (4, 0), (3, 0)] {
            assert!(for_version(major, minor).is_none(), "{}.{}", major, minor);
        }
        for (i, l) in ALL.iter().enumerate() {
            assert_eq!(l.minor as usize, 9 + i);
            assert_eq!(for_version(l.major, l.minor), Some(*l));
        }
    }

    #[test]
    fn kinds_per_version() {
        assert_eq!(
            (PY39.frame_kind, PY39.instr_kind),
            (FrameKind::Legacy, InstrKind::LastiBytes)
        );
        assert_eq!(
            (PY310.frame_kind, PY310.instr_kind),
            (FrameKind::Legacy, InstrKind::LastiCodeUnits)
        );
        assert_eq!(
            (PY311.frame_kind, PY311.instr_kind),
            (FrameKind::Cframe, InstrKind::PrevInstr)
        );
        assert_eq!(
            (PY312.frame_kind, PY312.instr_kind),
            (FrameKind::Cframe, InstrKind::PrevInstr)
        );
        assert_eq!(
            (PY313.frame_kind, PY313.instr_kind),
            (FrameKind::Direct, InstrKind::InstrPtr)
        );
    }

    #[test]
    fn optional_fields_present_exactly_where_they_exist() {
        for l in ALL {
            let new = l.minor >= 11;
            assert_eq!(l.tstate_native_thread_id.is_some(), new);
            assert_eq!(l.frame_owner.is_some(), new);
            assert_eq!(l.code_qualname.is_some(), new);
            assert_eq!(l.code_adaptive.is_some(), new);
            assert_eq!(l.code_firsttraceable.is_some(), new);
            assert_eq!(l.code_code.is_some(), !new);
            assert_eq!(l.frame_is_entry.is_some(), l.minor == 11);
            assert_eq!(l.owner_cstack, if l.minor >= 12 { Some(3) } else { None });
            if l.frame_kind != FrameKind::Cframe {
                assert_eq!(l.cframe_current_frame, 0);
            }
        }
    }

    #[test]
    fn offsets_are_plausible() {
        for l in ALL {
            // Pointer-sized fields are 8-aligned and inside small structs.
            for (name, off) in [
                ("tstate_frame", l.tstate_frame),
                ("frame_back", l.frame_back),
                ("frame_code", l.frame_code),
                ("code_filename", l.code_filename),
                ("code_name", l.code_name),
                ("code_linetable", l.code_linetable),
                ("bytes_size", l.bytes_size),
                ("unicode_length", l.unicode_length),
                ("tstate_next", l.tstate_next),
                ("tstate_thread_id", l.tstate_thread_id),
            ] {
                assert_eq!(off % 8, 0, "{}.{} {}", l.major, l.minor, name);
                assert!(off < 512, "{}.{} {}", l.major, l.minor, name);
            }
            // Thread enumeration: pointers inside the (large, on 3.13)
            // _PyRuntimeState / PyInterpreterState.
            for (name, off) in [
                ("runtime_interpreters_head", l.runtime_interpreters_head),
                ("interp_threads_head", l.interp_threads_head),
            ] {
                assert_eq!(off % 8, 0, "{}.{} {}", l.major, l.minor, name);
                assert!(off < 16384, "{}.{} {}", l.major, l.minor, name);
            }
            // PyThreadState starts `prev, next`.
            assert_eq!(l.tstate_next, 8);
            for other in [Some(l.tstate_frame), l.tstate_native_thread_id] {
                assert_ne!(Some(l.tstate_next), other);
                assert_ne!(Some(l.tstate_thread_id), other);
            }
            assert_ne!(l.tstate_next, l.tstate_thread_id);
            if l.minor >= 13 {
                // _Py_DebugOffsets is the first member of _PyRuntimeState.
                assert!(l.runtime_interpreters_head >= debug_offsets_313::SIZE);
            }
            if l.instr_kind == InstrKind::PrevInstr || l.instr_kind == InstrKind::InstrPtr {
                assert_eq!(l.frame_instr % 8, 0); // a pointer
            } else {
                assert_eq!(l.frame_instr % 4, 0); // an int
            }
            assert_ne!(l.frame_back, l.frame_code);
            assert_ne!(l.frame_back, l.frame_instr);
            assert_ne!(l.frame_code, l.frame_instr);
            // Consecutive PyObject * members of PyCodeObject.
            assert_eq!(l.code_name, l.code_filename + 8);
            if let Some(q) = l.code_qualname {
                assert_eq!(q, l.code_name + 8);
                assert_eq!(l.code_linetable, q + 8);
            }
            // The inline bytecode is the last member, after everything else.
            if let Some(a) = l.code_adaptive {
                assert!(a > l.code_linetable && a > l.code_firstlineno);
                assert!(a > l.code_firsttraceable.unwrap());
            }
            // Frame: owner / is_entry are bytes after the instruction pointer.
            if let Some(o) = l.frame_owner {
                assert!(o > l.frame_instr && o > l.frame_back && o > l.frame_code);
                if let Some(e) = l.frame_is_entry {
                    assert_eq!(o, e + 1);
                }
            }
            // PyObject_VAR_HEAD then data; PyASCIIObject header then data.
            assert_eq!((l.bytes_size, l.bytes_data), (16, 32));
            assert!(l.unicode_length < l.unicode_state);
            assert!(l.unicode_state + 4 <= l.ascii_object_size);
            assert_eq!(l.ascii_object_size, if l.minor >= 12 { 40 } else { 48 });
        }
        const _: () = assert!(UNICODE_STATE_COMPACT_BIT < UNICODE_STATE_ASCII_BIT);
        const _: () = assert!(UNICODE_STATE_ASCII_BIT < 32);
        assert_eq!(
            UNICODE_STATE_KIND_MASK << UNICODE_STATE_KIND_SHIFT,
            0b1_1100
        );
        assert_eq!(
            (UNICODE_STATE_KIND_MASK << UNICODE_STATE_KIND_SHIFT)
                & (1 << UNICODE_STATE_COMPACT_BIT),
            0
        );
    }

    #[test]
    fn kind_names_round_trip() {
        for l in ALL {
            assert_eq!(
                expected(l.major, l.minor, "frame_kind"),
                Some(l.frame_kind.as_str())
            );
            assert_eq!(
                expected(l.major, l.minor, "instr_kind"),
                Some(l.instr_kind.as_str())
            );
        }
    }

    /// Every number in this file equals what derive.sh printed (expected.txt).
    #[test]
    fn matches_expected_txt() {
        let mut sections = 0;
        for line in EXPECTED.lines() {
            if line.starts_with('[') {
                sections += 1;
            }
        }
        assert_eq!(
            sections,
            ALL.len(),
            "expected.txt and ALL disagree on the versions"
        );
        for l in ALL {
            let ver = expected(l.major, l.minor, "version").expect("section present");
            let mut it = ver.split('.');
            assert_eq!(it.next().unwrap().parse::<u8>().unwrap(), l.major);
            assert_eq!(it.next().unwrap().parse::<u8>().unwrap(), l.minor);

            assert_eq!(l.tstate_frame, want(l, "tstate_frame"));
            assert_eq!(l.cframe_current_frame, want(l, "cframe_current_frame"));
            assert_eq!(
                l.tstate_native_thread_id,
                want_opt(l, "tstate_native_thread_id")
            );
            assert_eq!(l.tstate_next, want(l, "tstate_next"));
            assert_eq!(l.tstate_thread_id, want(l, "tstate_thread_id"));
            assert_eq!(
                l.runtime_interpreters_head,
                want(l, "runtime_interpreters_head")
            );
            assert_eq!(l.interp_threads_head, want(l, "interp_threads_head"));
            assert_eq!(l.frame_back, want(l, "frame_back"));
            assert_eq!(l.frame_code, want(l, "frame_code"));
            assert_eq!(l.frame_instr, want(l, "frame_instr"));
            assert_eq!(l.frame_owner, want_opt(l, "frame_owner"));
            assert_eq!(l.frame_is_entry, want_opt(l, "frame_is_entry"));
            assert_eq!(l.owner_cstack.map(usize::from), want_opt(l, "owner_cstack"));
            assert_eq!(l.code_filename, want(l, "code_filename"));
            assert_eq!(l.code_name, want(l, "code_name"));
            assert_eq!(l.code_qualname, want_opt(l, "code_qualname"));
            assert_eq!(l.code_firstlineno, want(l, "code_firstlineno"));
            assert_eq!(l.code_linetable, want(l, "code_linetable"));
            assert_eq!(l.code_code, want_opt(l, "code_code"));
            assert_eq!(l.code_adaptive, want_opt(l, "code_adaptive"));
            assert_eq!(l.code_firsttraceable, want_opt(l, "code_firsttraceable"));
            assert_eq!(l.bytes_size, want(l, "bytes_size"));
            assert_eq!(l.bytes_data, want(l, "bytes_data"));
            assert_eq!(l.ascii_object_size, want(l, "ascii_object_size"));
            assert_eq!(l.unicode_length, want(l, "unicode_length"));
            assert_eq!(l.unicode_state, want(l, "unicode_state"));

            // Module-wide constants hold for every version.
            assert_eq!(
                UNICODE_STATE_COMPACT_BIT as usize,
                want(l, "unicode_state_compact_bit")
            );
            assert_eq!(
                UNICODE_STATE_ASCII_BIT as usize,
                want(l, "unicode_state_ascii_bit")
            );
            assert_eq!(
                UNICODE_STATE_KIND_SHIFT as usize,
                want(l, "unicode_state_kind_shift")
            );
            assert_eq!(
                UNICODE_STATE_KIND_MASK.count_ones() as usize,
                want(l, "unicode_state_kind_bits")
            );
            assert_eq!(CODE_UNIT_SIZE, want(l, "code_unit_size"));
            let gen = want_opt(l, "owner_generator");
            assert_eq!(
                gen,
                if l.minor >= 11 {
                    Some(OWNER_GENERATOR as usize)
                } else {
                    None
                }
            );
        }
    }

    #[test]
    fn debug_offsets_313_match_expected_txt() {
        use debug_offsets_313 as d;
        let l = &PY313;
        assert_eq!(d::COOKIE, b"xdebugpy");
        assert_eq!(0, want(l, "dbg_cookie"));
        assert_eq!(d::VERSION, want(l, "dbg_version"));
        assert_eq!(d::FREE_THREADED, want(l, "dbg_free_threaded"));
        assert_eq!(d::SIZE, want(l, "dbg_sizeof"));
        for c in d::CHECKS.iter() {
            // Offset inside _Py_DebugOffsets, as derive.c's offsetof printed it.
            let mut name = [0u8; 64];
            let key = b"dbg_";
            name[..4].copy_from_slice(key);
            name[4..4 + c.field.len()].copy_from_slice(c.field.as_bytes());
            let key = core::str::from_utf8(&name[..4 + c.field.len()]).unwrap();
            assert_eq!(c.dbg_offset, want(l, key), "{}", c.field);
            // Expected value is the table's own value for that field.
            assert_eq!(c.expected as usize, want(l, c.field), "{}", c.field);
            assert_eq!(c.dbg_offset % 8, 0);
            assert!(c.dbg_offset + 8 <= d::SIZE);
        }
        // Derived by derive.c and cross-checked by derive.sh against the
        // running 3.13's _Py_DebugOffsets, but not (yet) run-time CHECKS.
        for f in DBG_NOT_IN_CHECKS {
            assert!(
                d::CHECKS.iter().all(|c| c.field != f),
                "{} is in CHECKS now: drop it from DBG_NOT_IN_CHECKS",
                f
            );
            let off = want(l, &format!("dbg_{}", f));
            assert_eq!(off % 8, 0, "{}", f);
            assert!(off + 8 <= d::SIZE, "{}", f);
            want(l, f); // the Layout value itself: see matches_expected_txt
        }
        // Every dbg_ line in expected.txt is covered by a constant (or is
        // one of DBG_NOT_IN_CHECKS), and nothing else is there.
        let mut n = 0;
        let mut in313 = false;
        for line in EXPECTED.lines() {
            if line.starts_with('[') {
                in313 = line == "[3.13]";
            } else if in313 && line.starts_with("dbg_") {
                n += 1;
                let name = line["dbg_".len()..].split('=').next().unwrap();
                assert!(
                    ["cookie", "version", "free_threaded", "sizeof"].contains(&name)
                        || d::CHECKS.iter().any(|c| c.field == name)
                        || DBG_NOT_IN_CHECKS.contains(&name),
                    "expected.txt line {:?} is not covered",
                    line
                );
            }
        }
        // cookie, version, free_threaded, sizeof + the CHECKS entries + the
        // derived-only ones.
        assert_eq!(n, 4 + d::CHECKS.len() + DBG_NOT_IN_CHECKS.len());
    }

    /// `_Py_DebugOffsets` members that derive.c prints as `dbg_<field>` (and
    /// derive.sh compares with the running 3.13) but that
    /// `debug_offsets_313::CHECKS` does not check at run time yet: the
    /// thread-enumeration offsets (`thread_state.next`, `.thread_id`,
    /// `runtime_state.interpreters_head`, `interpreter_state.threads_head`).
    const DBG_NOT_IN_CHECKS: [&str; 4] = [
        "tstate_next",
        "tstate_thread_id",
        "runtime_interpreters_head",
        "interp_threads_head",
    ];
}
