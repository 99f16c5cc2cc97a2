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
}

impl Kind {
    /// The kind for a raw tag, or `None` for a tag this version does not know.
    pub fn from_u16(tag: u16) -> Option<Kind> {
        match tag {
            1 => Some(Kind::ProcessStart),
            2 => Some(Kind::ProcessExit),
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
