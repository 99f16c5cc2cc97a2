//! What CPython 3.13+ says of its own layout: `_Py_DebugOffsets`, the first member of
//! `_PyRuntimeState` (so it starts at the `_PyRuntime` symbol, in the ELF section
//! `.PyRuntime`). Its own layout changes with every minor version (3.14 and 3.15 insert
//! members in the middle), so each minor has a [`DebugSpec`]: where, inside it, each value
//! the walker takes lives (`dbg_<field>` in expected.txt, `offsetof` against that minor's
//! headers). [`layout`] reads the table of a running interpreter, checks it as untrusted
//! input (cookie, version, build, every offset inside the struct it describes, aligned for
//! what is read there) and gives the [`Layout`] the walker uses: every offset the table
//! carries comes from the interpreter, the rest (owner values, tag bits, string state bits,
//! `_co_firsttraceable`, the line-table format) from the derived table of that version, or of
//! the newest version known for a newer one. No allocation: it runs in the preload library.

use super::{for_build, newest, Layout};
use crate::Memory;

/// `_Py_Debug_Cookie`, `char cookie[8]` at offset 0 (no NUL).
pub const COOKIE: &[u8; 8] = b"xdebugpy";
/// `version` (`PY_VERSION_HEX`), in every minor.
pub const VERSION: usize = 8;
/// `free_threaded` (1 on `Py_GIL_DISABLED` builds), in every minor.
pub const FREE_THREADED: usize = 16;
/// Most bytes of `_Py_DebugOffsets` any spec reads (3.15's struct is 888 bytes).
pub const MAX_SIZE: usize = 1024;

/// A [`Layout`] field whose value `_Py_DebugOffsets` carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    TstateFrame,
    TstateNativeThreadId,
    TstateNext,
    TstateThreadId,
    TstateBaseFrame,
    RuntimeInterpretersHead,
    InterpThreadsHead,
    FrameBack,
    FrameCode,
    FrameInstr,
    FrameOwner,
    FrameTlbcIndex,
    ObjectType,
    CodeFilename,
    CodeName,
    CodeQualname,
    CodeLinetable,
    CodeFirstlineno,
    CodeAdaptive,
    CodeTlbc,
    BytesSize,
    BytesData,
    AsciiObjectSize,
    CompactObjectSize,
    UnicodeLength,
    UnicodeState,
}

/// The structs `_Py_DebugOffsets` publishes the size of: every offset into one must lie
/// inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Struct {
    Runtime,
    Interp,
    Tstate,
    Frame,
    Code,
    Object,
    Bytes,
    Unicode,
}

impl Struct {
    /// Every struct, in the order of [`DebugSpec::sizes`].
    pub const ALL: [Struct; 8] = [
        Struct::Runtime,
        Struct::Interp,
        Struct::Tstate,
        Struct::Frame,
        Struct::Code,
        Struct::Object,
        Struct::Bytes,
        Struct::Unicode,
    ];

    /// The largest size believed for it (a bound on untrusted input).
    const fn most(self) -> u64 {
        match self {
            Struct::Runtime | Struct::Interp => 1 << 20,
            Struct::Tstate => 1 << 14,
            Struct::Frame | Struct::Code | Struct::Object | Struct::Bytes | Struct::Unicode => {
                1 << 10
            }
        }
    }

    /// Its name in expected.txt (`dbgsize_<name>`).
    pub const fn name(self) -> &'static str {
        match self {
            Struct::Runtime => "runtime",
            Struct::Interp => "interp",
            Struct::Tstate => "tstate",
            Struct::Frame => "frame",
            Struct::Code => "code",
            Struct::Object => "object",
            Struct::Bytes => "bytes",
            Struct::Unicode => "unicode",
        }
    }
}

impl Field {
    /// The field's name in `Layout` and expected.txt (`dbg_<name>`).
    pub const fn name(self) -> &'static str {
        match self {
            Field::TstateFrame => "tstate_frame",
            Field::TstateNativeThreadId => "tstate_native_thread_id",
            Field::TstateNext => "tstate_next",
            Field::TstateThreadId => "tstate_thread_id",
            Field::TstateBaseFrame => "tstate_base_frame",
            Field::RuntimeInterpretersHead => "runtime_interpreters_head",
            Field::InterpThreadsHead => "interp_threads_head",
            Field::FrameBack => "frame_back",
            Field::FrameCode => "frame_code",
            Field::FrameInstr => "frame_instr",
            Field::FrameOwner => "frame_owner",
            Field::FrameTlbcIndex => "frame_tlbc_index",
            Field::ObjectType => "object_type",
            Field::CodeFilename => "code_filename",
            Field::CodeName => "code_name",
            Field::CodeQualname => "code_qualname",
            Field::CodeLinetable => "code_linetable",
            Field::CodeFirstlineno => "code_firstlineno",
            Field::CodeAdaptive => "code_adaptive",
            Field::CodeTlbc => "code_tlbc",
            Field::BytesSize => "bytes_size",
            Field::BytesData => "bytes_data",
            Field::AsciiObjectSize => "ascii_object_size",
            Field::CompactObjectSize => "compact_object_size",
            Field::UnicodeLength => "unicode_length",
            Field::UnicodeState => "unicode_state",
        }
    }

    /// The struct it is an offset into, and how many bytes the walker reads there (its
    /// alignment too); 0 for a value that is itself a size within that struct.
    const fn place(self) -> (Struct, u64) {
        match self {
            Field::TstateFrame
            | Field::TstateNativeThreadId
            | Field::TstateNext
            | Field::TstateThreadId => (Struct::Tstate, 8),
            // A pointer to the base frame (embedded further on in `_PyThreadStateImpl`).
            Field::TstateBaseFrame => (Struct::Tstate, 8),
            Field::RuntimeInterpretersHead => (Struct::Runtime, 8),
            Field::InterpThreadsHead => (Struct::Interp, 8),
            Field::FrameBack | Field::FrameCode | Field::FrameInstr => (Struct::Frame, 8),
            Field::FrameOwner => (Struct::Frame, 1),
            Field::FrameTlbcIndex => (Struct::Frame, 4),
            Field::ObjectType => (Struct::Object, 8),
            Field::CodeFilename
            | Field::CodeName
            | Field::CodeQualname
            | Field::CodeLinetable
            | Field::CodeTlbc => (Struct::Code, 8),
            Field::CodeFirstlineno => (Struct::Code, 4),
            // The inline bytecode starts here: the last member.
            Field::CodeAdaptive => (Struct::Code, 0),
            Field::BytesSize => (Struct::Bytes, 8),
            Field::BytesData => (Struct::Bytes, 0),
            Field::AsciiObjectSize | Field::CompactObjectSize => (Struct::Unicode, 0),
            Field::UnicodeLength => (Struct::Unicode, 8),
            Field::UnicodeState => (Struct::Unicode, 4),
        }
    }

    /// Whether 0 means "this build has no such field" (thread-local bytecode exists only in
    /// free-threaded builds; its members are 0 in the others).
    const fn zero_is_none(self) -> bool {
        matches!(self, Field::FrameTlbcIndex | Field::CodeTlbc)
    }

    /// The field's value in `l` (`None`: the layout has no such field).
    pub fn get(self, l: &Layout) -> Option<usize> {
        match self {
            Field::TstateFrame => Some(l.tstate_frame),
            Field::TstateNativeThreadId => l.tstate_native_thread_id,
            Field::TstateNext => Some(l.tstate_next),
            Field::TstateThreadId => Some(l.tstate_thread_id),
            Field::TstateBaseFrame => l.tstate_base_frame,
            Field::RuntimeInterpretersHead => Some(l.runtime_interpreters_head),
            Field::InterpThreadsHead => Some(l.interp_threads_head),
            Field::FrameBack => Some(l.frame_back),
            Field::FrameCode => Some(l.frame_code),
            Field::FrameInstr => Some(l.frame_instr),
            Field::FrameOwner => l.frame_owner,
            Field::FrameTlbcIndex => l.frame_tlbc_index,
            Field::ObjectType => Some(l.object_type),
            Field::CodeFilename => Some(l.code_filename),
            Field::CodeName => Some(l.code_name),
            Field::CodeQualname => l.code_qualname,
            Field::CodeLinetable => Some(l.code_linetable),
            Field::CodeFirstlineno => Some(l.code_firstlineno),
            Field::CodeAdaptive => l.code_adaptive,
            Field::CodeTlbc => l.code_tlbc,
            Field::BytesSize => Some(l.bytes_size),
            Field::BytesData => Some(l.bytes_data),
            Field::AsciiObjectSize => Some(l.ascii_object_size),
            Field::CompactObjectSize => Some(l.compact_object_size),
            Field::UnicodeLength => Some(l.unicode_length),
            Field::UnicodeState => Some(l.unicode_state),
        }
    }

    fn set(self, l: &mut Layout, v: Option<usize>) {
        let must = v.unwrap_or(0);
        match self {
            Field::TstateFrame => l.tstate_frame = must,
            Field::TstateNativeThreadId => l.tstate_native_thread_id = v,
            Field::TstateNext => l.tstate_next = must,
            Field::TstateThreadId => l.tstate_thread_id = must,
            Field::TstateBaseFrame => l.tstate_base_frame = v,
            Field::RuntimeInterpretersHead => l.runtime_interpreters_head = must,
            Field::InterpThreadsHead => l.interp_threads_head = must,
            Field::FrameBack => l.frame_back = must,
            Field::FrameCode => l.frame_code = must,
            Field::FrameInstr => l.frame_instr = must,
            Field::FrameOwner => l.frame_owner = v,
            Field::FrameTlbcIndex => l.frame_tlbc_index = v,
            Field::ObjectType => l.object_type = must,
            Field::CodeFilename => l.code_filename = must,
            Field::CodeName => l.code_name = must,
            Field::CodeQualname => l.code_qualname = v,
            Field::CodeLinetable => l.code_linetable = must,
            Field::CodeFirstlineno => l.code_firstlineno = must,
            Field::CodeAdaptive => l.code_adaptive = v,
            Field::CodeTlbc => l.code_tlbc = v,
            Field::BytesSize => l.bytes_size = must,
            Field::BytesData => l.bytes_data = must,
            Field::AsciiObjectSize => l.ascii_object_size = must,
            Field::CompactObjectSize => l.compact_object_size = must,
            Field::UnicodeLength => l.unicode_length = must,
            Field::UnicodeState => l.unicode_state = must,
        }
    }
}

/// Where one minor's `_Py_DebugOffsets` keeps what the walker takes from it.
#[derive(Debug, PartialEq, Eq)]
pub struct DebugSpec {
    /// The minor version whose headers this describes.
    pub minor: u8,
    /// `sizeof(_Py_DebugOffsets)`: bytes read at `_PyRuntime`.
    pub size: usize,
    /// Each field and its position inside `_Py_DebugOffsets`.
    pub fields: &'static [(Field, usize)],
    /// Position of each struct's published size, in [`Struct::ALL`]'s order.
    pub sizes: [usize; 8],
}

/// CPython 3.13 (3.13.0 and 3.13.5t headers: the same positions in both builds).
pub const DEBUG_313: DebugSpec = DebugSpec {
    minor: 13,
    size: 584,
    fields: &[
        (Field::TstateFrame, 184),
        (Field::TstateNativeThreadId, 200),
        (Field::TstateNext, 168),
        (Field::TstateThreadId, 192),
        (Field::RuntimeInterpretersHead, 40),
        (Field::InterpThreadsHead, 72),
        (Field::FrameBack, 232),
        (Field::FrameCode, 240),
        (Field::FrameInstr, 248),
        (Field::FrameOwner, 264),
        (Field::ObjectType, 360),
        (Field::CodeFilename, 280),
        (Field::CodeName, 288),
        (Field::CodeQualname, 296),
        (Field::CodeLinetable, 304),
        (Field::CodeFirstlineno, 312),
        (Field::CodeAdaptive, 344),
        (Field::BytesSize, 520),
        (Field::BytesData, 528),
        (Field::AsciiObjectSize, 560),
        (Field::UnicodeLength, 552),
        (Field::UnicodeState, 544),
    ],
    sizes: [24, 48, 152, 224, 272, 352, 512, 536],
};

/// CPython 3.14 (3.14.10 headers).
pub const DEBUG_314: DebugSpec = DebugSpec {
    minor: 14,
    size: 760,
    fields: &[
        (Field::TstateFrame, 208),
        (Field::TstateNativeThreadId, 224),
        (Field::TstateNext, 192),
        (Field::TstateThreadId, 216),
        (Field::RuntimeInterpretersHead, 40),
        (Field::InterpThreadsHead, 72),
        (Field::FrameBack, 256),
        (Field::FrameCode, 264),
        (Field::FrameInstr, 272),
        (Field::FrameOwner, 288),
        (Field::FrameTlbcIndex, 304),
        (Field::CodeTlbc, 392),
        (Field::ObjectType, 408),
        (Field::CodeFilename, 320),
        (Field::CodeName, 328),
        (Field::CodeQualname, 336),
        (Field::CodeLinetable, 344),
        (Field::CodeFirstlineno, 352),
        (Field::CodeAdaptive, 384),
        (Field::BytesSize, 600),
        (Field::BytesData, 608),
        (Field::AsciiObjectSize, 640),
        (Field::UnicodeLength, 632),
        (Field::UnicodeState, 624),
    ],
    sizes: [24, 48, 176, 248, 312, 400, 592, 616],
};

/// CPython 3.15 (3.15.2 headers).
pub const DEBUG_315: DebugSpec = DebugSpec {
    minor: 15,
    size: 888,
    fields: &[
        (Field::TstateFrame, 208),
        (Field::TstateNativeThreadId, 248),
        (Field::TstateNext, 192),
        (Field::TstateThreadId, 240),
        (Field::TstateBaseFrame, 216),
        (Field::RuntimeInterpretersHead, 40),
        (Field::InterpThreadsHead, 72),
        (Field::FrameBack, 320),
        (Field::FrameCode, 328),
        (Field::FrameInstr, 336),
        (Field::FrameOwner, 352),
        (Field::FrameTlbcIndex, 368),
        (Field::CodeTlbc, 456),
        (Field::ObjectType, 472),
        (Field::CodeFilename, 384),
        (Field::CodeName, 392),
        (Field::CodeQualname, 400),
        (Field::CodeLinetable, 408),
        (Field::CodeFirstlineno, 416),
        (Field::CodeAdaptive, 448),
        (Field::BytesSize, 696),
        (Field::BytesData, 704),
        (Field::AsciiObjectSize, 736),
        (Field::CompactObjectSize, 744),
        (Field::UnicodeLength, 728),
        (Field::UnicodeState, 720),
    ],
    sizes: [24, 48, 176, 312, 376, 464, 688, 712],
};

/// Why no layout could be had from an interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No layout is known for this version (older than 3.9, or a free-threaded build of a
    /// version mlprof has no table for and whose `_Py_DebugOffsets` cannot stand in).
    Unsupported,
    /// `_Py_DebugOffsets` could not be read.
    Unreadable,
    /// Its cookie is not `xdebugpy`, or its version is not the interpreter's.
    NotTheTable,
    /// A value in it is outside the struct it describes, misaligned, or absurd: the name of
    /// the field.
    Invalid(&'static str),
}

/// How the layout was had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The derived table of this version (3.9-3.12, which publish nothing), or the
    /// interpreter's `_Py_DebugOffsets` and the table agreeing on every value.
    Table,
    /// `_Py_DebugOffsets` alone: a minor newer than any known, values that differ from the
    /// table, or the tables turned off. The walk must pass a self-check (`check.rs`) first.
    Offsets,
}

/// The layout to walk `major.minor` (free-threaded or not) with, from its `_Py_DebugOffsets`
/// at `runtime` where it has one. `tables`: false to take everything the interpreter carries
/// from it even where the derived table agrees (a test of the path a newer minor takes).
pub fn layout(
    mem: &impl Memory,
    runtime: usize,
    (major, minor): (u8, u8),
    free_threaded: bool,
    tables: bool,
) -> Result<(Layout, Source), Refusal> {
    if major != 3 {
        return Err(Refusal::Unsupported);
    }
    let known = for_build(minor, free_threaded);
    if minor < 13 {
        // Nothing published: the table alone (there are no free-threaded builds).
        return match known {
            Some(l) if !free_threaded => Ok((*l, Source::Table)),
            _ => Err(Refusal::Unsupported),
        };
    }
    let base = match known {
        Some(l) => l,
        None if minor > newest().minor => newest_of(free_threaded),
        None => return Err(Refusal::Unsupported),
    };
    let spec = base.debug.ok_or(Refusal::Unsupported)?;
    let mut table = [0u8; MAX_SIZE];
    let table = table.get_mut(..spec.size).ok_or(Refusal::Unsupported)?;
    if runtime == 0 {
        return Err(Refusal::Unreadable);
    }
    mem.bytes(runtime, table).ok_or(Refusal::Unreadable)?;
    let read = from_table(table, spec, base, (major, minor), free_threaded)?;
    match known {
        Some(l) if tables && read == *l => Ok((*l, Source::Table)),
        _ => Ok((read, Source::Offsets)),
    }
}

/// The newest known layout of a build (a newer minor is read as it).
fn newest_of(free_threaded: bool) -> &'static Layout {
    let n = newest();
    for_build(n.minor, free_threaded).unwrap_or(n)
}

/// The layout `table` (a copy of `_Py_DebugOffsets`, described by `spec`) gives, over `base`
/// for what it does not carry.
pub fn from_table(
    table: &[u8],
    spec: &DebugSpec,
    base: &Layout,
    (major, minor): (u8, u8),
    free_threaded: bool,
) -> Result<Layout, Refusal> {
    let word = |at: usize| -> Option<u64> {
        let b = table.get(at..at.checked_add(8)?)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Some(u64::from_le_bytes(w))
    };
    if table.get(..8) != Some(&COOKIE[..]) {
        return Err(Refusal::NotTheTable);
    }
    let version = word(VERSION).ok_or(Refusal::Unreadable)?;
    if version >> 16 != ((major as u64) << 8 | minor as u64) {
        return Err(Refusal::NotTheTable);
    }
    if word(FREE_THREADED) != Some(free_threaded as u64) {
        return Err(Refusal::NotTheTable);
    }
    let mut sizes = [0u64; 8];
    for (i, (size, &at)) in sizes.iter_mut().zip(spec.sizes.iter()).enumerate() {
        let s = Struct::ALL.get(i).copied().unwrap_or(Struct::Runtime);
        *size = word(at).ok_or(Refusal::Unreadable)?;
        if *size == 0 || *size > s.most() {
            return Err(Refusal::Invalid(s.name()));
        }
    }
    let mut l = *base;
    l.minor = minor;
    for &(field, at) in spec.fields {
        let value = word(at).ok_or(Refusal::Unreadable)?;
        let (within, width) = field.place();
        let size = Struct::ALL
            .iter()
            .position(|&s| s == within)
            .and_then(|i| sizes.get(i))
            .copied()
            .unwrap_or(0);
        if value == 0 && field.zero_is_none() {
            field.set(&mut l, None);
            continue;
        }
        let fits = value.checked_add(width).is_some_and(|end| end <= size);
        let aligned = width == 0 || value % width == 0;
        if !fits || !aligned {
            return Err(Refusal::Invalid(field.name()));
        }
        field.set(&mut l, Some(value as usize));
    }
    // Not carried, but it sits at a fixed distance before the inline bytecode in every
    // version's `PyCodeObject`: keep the base's distance when the bytecode moved.
    if let (Some(first), Some(adaptive), Some(base_adaptive)) = (
        base.code_firsttraceable,
        l.code_adaptive,
        base.code_adaptive,
    ) {
        l.code_firsttraceable = (first + adaptive).checked_sub(base_adaptive);
    }
    // Thread-local bytecode needs both halves, and the code array's layout from the table.
    if l.frame_tlbc_index.is_some() != l.code_tlbc.is_some()
        || l.code_tlbc.is_some() && l.code_array_entries.is_none()
    {
        return Err(Refusal::Invalid("code_tlbc"));
    }
    Ok(l)
}
