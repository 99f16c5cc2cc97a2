//! Fixed-size event records: what a profiled process tells the collector, as raw facts
//! (pointers, offsets, sizes, timestamps). Decoding is the collector's job.

/// What a [`Record`] means. The payload words `a`..`e` are interpreted per kind.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The process attached to its channel. `a` = pid, `b` = ppid, `c` = 1 if it is a fork
    /// child (inherited heap), else 0.
    ProcessStart = 1,
    /// The process is exiting. `a` = exit code (as i64), `b` = 1 if through `_exit`
    /// (no interpreter shutdown), else 0.
    ProcessExit = 2,
    /// A CPU-time sample of the writing thread. `a` = interrupted instruction pointer,
    /// `b` = CPU nanoseconds this sample stands for, `c` = number of Python frames that follow
    /// in [`Kind::Frames`] records (innermost first) | [`sample_flags`] << 32,
    /// `d` = the thread's `PyThreadState` address (0 if none).
    Sample = 3,
    /// Up to [`FRAMES_PER_RECORD`] Python frames of the preceding sample, each word
    /// `code_id << 32 | lasti` (lasti in 2-byte code units, as `i32`).
    Frames = 4,
    /// A code object, sent once, before or (when two threads race) soon after its id is first
    /// used in frames. `a` = code id, `b` = first line (`i32`) | filename kind << 32 | qualname
    /// kind << 40 (string kinds: 0 none, 1 latin-1, 2 UCS-2, 4 UCS-4), `c` = filename bytes |
    /// qualname bytes << 32, `d` = line-table bytes, `e` = code object address. The bytes
    /// follow in [`Kind::Data`] records: filename, qualname, line table, concatenated.
    Code = 5,
    /// 40 raw bytes continuing the preceding record (`a`..`e`, little-endian).
    Data = 6,
    /// A thread started. `a` = kernel tid, `b` = `pthread_self()`.
    ThreadStart = 7,
    /// A sampled allocation. `a` = address, `b` = size in bytes, `c` = bytes it stands for
    /// (Poisson weight), `d` = number of Python frames that follow in [`Kind::Frames`]
    /// records | [`alloc_flags`] << 32.
    Alloc = 8,
    /// A sampled allocation was freed. `a` = address.
    Free = 9,
    /// The heap reached a new high (at least 1% above the previous mark). `a` = heap bytes.
    PeakMark = 10,
    /// A sampled copy (`memcpy` family). `a` = bytes copied, `b` = bytes it stands for,
    /// `c` = number of Python frames that follow.
    Copy = 11,
}

/// Flags of a [`Kind::Alloc`] (bits of `d >> 32`).
pub mod alloc_flags {
    /// Allocated through Python's object / memory allocator (`PyObject_Malloc`, `PyMem_Malloc`).
    pub const PYTHON: u32 = 1;
    /// An anonymous memory mapping (`mmap`).
    pub const MMAP: u32 = 2;
}

/// Frames packed in one [`Kind::Frames`] record.
pub const FRAMES_PER_RECORD: usize = 5;
/// Bytes carried by one [`Kind::Data`] record.
pub const DATA_BYTES: usize = 40;
/// Code id meaning "unknown code object" (the code table was full).
pub const UNKNOWN_CODE: u32 = u32::MAX;

/// Flags of a [`Kind::Sample`] (bits of `c >> 32`).
pub mod sample_flags {
    /// The frame walk stopped at the depth limit: outer frames are missing.
    pub const TRUNCATED: u32 = 1;
    /// The walk met a pointer that failed validation; the frames before it are kept.
    pub const WALK_FAILED: u32 = 2;
    /// The thread has no Python thread state (a native thread, or before `Py_Initialize`).
    pub const NO_PYTHON: u32 = 4;
    /// Set by the collector, never on the wire: an off-CPU (waiting) sample taken from outside.
    pub const WAITING: u32 = 8;
}

impl Kind {
    /// The kind for a raw tag, or `None` for a tag this version does not know.
    pub fn from_u16(tag: u16) -> Option<Kind> {
        match tag {
            1 => Some(Kind::ProcessStart),
            2 => Some(Kind::ProcessExit),
            3 => Some(Kind::Sample),
            4 => Some(Kind::Frames),
            5 => Some(Kind::Code),
            6 => Some(Kind::Data),
            7 => Some(Kind::ThreadStart),
            8 => Some(Kind::Alloc),
            9 => Some(Kind::Free),
            10 => Some(Kind::PeakMark),
            11 => Some(Kind::Copy),
            _ => None,
        }
    }
}

/// One event: 56 bytes, plain data. `ts_ns` is `CLOCK_MONOTONIC`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// A [`Kind`] tag.
    pub kind: u16,
    /// Kind-specific flags.
    pub flags: u16,
    /// Kernel thread id of the thread that wrote the record.
    pub tid: u32,
    /// `CLOCK_MONOTONIC` nanoseconds when the event happened.
    pub ts_ns: u64,
    /// Payload words, meaning per [`Kind`].
    pub a: u64,
    /// Payload word.
    pub b: u64,
    /// Payload word.
    pub c: u64,
    /// Payload word.
    pub d: u64,
    /// Payload word.
    pub e: u64,
}

impl Record {
    /// A record of `kind` with an empty payload.
    pub const fn new(kind: Kind, tid: u32, ts_ns: u64) -> Record {
        Record {
            kind: kind as u16,
            flags: 0,
            tid,
            ts_ns,
            a: 0,
            b: 0,
            c: 0,
            d: 0,
            e: 0,
        }
    }
}

const _: () = assert!(core::mem::size_of::<Record>() == 56);
