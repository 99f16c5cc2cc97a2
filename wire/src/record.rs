//! Fixed-size event records: what a profiled process tells the collector, as raw facts
//! (pointers, offsets, sizes, timestamps). Each kind has a payload struct, a constructor
//! (`Record::sample(..)`) used by the preload library and an accessor (`r.as_sample()`) used
//! by the collector, so the packing of the words `a`..`e` is written once, here. Accessors
//! only unpack: checking the values against the format's limits is the collector's job
//! (everything read from a channel is untrusted).

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
    /// A region the program marked itself (`mlprof.mark`, one pytest test): see [`Region`].
    /// `a` = region id (per process), `b` = phase | report level << 8 | name bytes << 32,
    /// `c` = heap bytes now, `d` = highest heap since the region began (end and peak phases).
    /// A begin's name (UTF-8) follows in [`Kind::Data`] records.
    Region = 12,
    /// The process's anonymous mappings (`mmap` outside the malloc family) reached a new high
    /// (at least 1% and 1 MiB above the previous mark). `a` = mapped bytes.
    MappedMark = 13,
    /// The writing thread blocked (`a` = 1) or unblocked (`a` = 0, `b` = the CPU nanoseconds it
    /// used while it was blocked) SIGPROF with
    /// `sigprocmask`/`pthread_sigmask` (or started with it blocked): its timer signals wait
    /// until it unblocks, and all of its CPU time meanwhile then goes to the one sample taken
    /// there, or to none if it never does.
    SigprofMask = 14,
    /// GPU memory a CUDA call gave the process (device, pinned host or managed): see
    /// [`crate::GpuAlloc`]. Every such call is recorded (no sampling). `a` = address, `b` =
    /// bytes, `c` = device | [`crate::gpu_space`] << 32, `d` = Python frames that follow.
    GpuAlloc = 15,
    /// GPU memory given back (`cudaFree`, `cudaFreeAsync`, `cudaFreeHost`). `a` = address,
    /// `b` = [`crate::gpu_space`].
    GpuFree = 16,
    /// A host/device copy through CUDA: see [`crate::GpuCopy`]. Every such call is recorded.
    /// `a` = bytes, `b` = [`crate::gpu_copy`] direction | synchronous << 8, `c` = Python frames
    /// that follow.
    GpuCopy = 17,
    /// A sampled kernel launch (or graph launch): `a` = launches it stands for, `b` = Python
    /// frames that follow, `c` = the id pushed to CUPTI around it (0: none; see
    /// [`Kind::GpuCorrelation`]).
    GpuLaunch = 18,
    /// A kernel ran on the device (CUPTI): see [`crate::GpuKernel`]. `a` = start, `b` = end
    /// (`CLOCK_MONOTONIC` ns), `c` = device | stream << 32, `d` = CUPTI's correlation id of
    /// its launch, `e` = its name's key.
    GpuKernel = 19,
    /// A sampled launch's id paired with CUPTI's id of its call: `a` = the launch sample's
    /// [`crate::GpuLaunch::external`], `b` = the correlation id.
    GpuCorrelation = 20,
    /// A kernel's name, once per key: `a` = key, `b` = bytes (UTF-8), which follow in
    /// [`Kind::Data`] records.
    GpuKernelName = 21,
    /// The kernel trace's state ([`crate::gpu_trace`]): `a` = state, `b` = its detail.
    GpuTrace = 22,
    /// Memory the interpreter itself made executable (CPython's JIT: its traces of Python
    /// code), `a` = start, `b` = bytes, `c` = 1; or such memory unmapped, `c` = 0. Time spent
    /// there is the interpreter's, on the lines its traces run.
    InterpreterCode = 23,
}

/// Most bytes of a region's name ([`Kind::Region`]); the preload library cuts longer names.
pub const MAX_REGION_NAME: usize = 1024;

/// What a region's end asks of the collector ([`Region::report`]).
pub mod region_report {
    /// Nothing.
    pub const NONE: u8 = 0;
    /// Its summary (`region-PID-ID.json` in the run's directory).
    pub const SUMMARY: u8 = 1;
    /// Its summary with its lines, and its own HTML page (`region-PID-ID.html`).
    pub const PAGE: u8 = 2;
}

/// Phases of a [`Kind::Region`] record.
pub mod region_phase {
    /// The region began.
    pub const BEGIN: u8 = 0;
    /// The region ended.
    pub const END: u8 = 1;
    /// The heap reached a new high inside the region (at least 1% and 1 MiB above the last).
    pub const PEAK: u8 = 2;
}

/// Flags of a [`Kind::Alloc`] (bits of `d >> 32`).
pub mod alloc_flags {
    /// Allocated through Python's object / memory allocator (`PyObject_Malloc`, `PyMem_Malloc`).
    pub const PYTHON: u32 = 1;
    /// An anonymous mapping made with `mmap` / `mremap` directly (not through malloc): counted
    /// apart from the heap (`docs/design/mapped-memory.md`).
    pub const MAPPED: u32 = 2;
    /// What is left of a sampled mapping cut in part (`munmap` or `madvise` of some of its
    /// pages): sent before the free of the mapping it is left of (whose start is the record's
    /// [`Record::cut_from`]), with no stack; it keeps that mapping's line and its share of its
    /// weight (`Record::mapped_cut`).
    pub const CUT: u32 = 4;
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
    /// A timed wait, measured by the thread itself: blocking calls (sleep, poll, select,
    /// epoll) that kept it off the CPU for `weight_ns` at this stack; `ip` is 0.
    pub const WAITED: u32 = 16;
    /// The CPU time the thread used since its last sample, sent when the thread or the process
    /// ends (`ip` 0, no frames): the CPU timer had not expired again by then. It belongs
    /// where the thread was last sampled. On a machine busier than its cores the kernel
    /// notices a CPU timer's expiry only at a scheduler tick that finds the thread running,
    /// so seconds of CPU can pass between samples; without this they were lost.
    pub const TAIL: u32 = 32;
    /// The thread was inside a call that waits for the GPU (a stream, event or device
    /// synchronisation, a synchronous copy): on a CPU sample, the CPU it spent there (spinning
    /// in the driver); with [`WAITED`], the time the call kept it off the CPU.
    pub const GPU_WAIT: u32 = 64;
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
            12 => Some(Kind::Region),
            13 => Some(Kind::MappedMark),
            14 => Some(Kind::SigprofMask),
            15 => Some(Kind::GpuAlloc),
            16 => Some(Kind::GpuFree),
            17 => Some(Kind::GpuCopy),
            18 => Some(Kind::GpuLaunch),
            19 => Some(Kind::GpuKernel),
            20 => Some(Kind::GpuCorrelation),
            21 => Some(Kind::GpuKernelName),
            22 => Some(Kind::GpuTrace),
            23 => Some(Kind::InterpreterCode),
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

/// [`Kind::ProcessStart`]: the process attached to its channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessStart {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// A fork child (its heap was inherited).
    pub forked: bool,
}

/// [`Kind::ProcessExit`]: the process is exiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessExit {
    /// The exit code as passed to `exit` / `_exit`.
    pub code: i64,
    /// Through `_exit` (no interpreter shutdown).
    pub immediate: bool,
}

/// [`Kind::Sample`]: a CPU-time sample of the writing thread; `depth` [`Kind::Frames`] words
/// follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// CPU nanoseconds this sample stands for.
    pub weight_ns: u64,
    /// Python frames that follow (innermost first; at most 65535 on the wire).
    pub depth: u32,
    /// [`sample_flags`].
    pub flags: u32,
    /// Share of `weight_ns` the kernel spent on the thread's page faults, in 1/10000 (0: none
    /// seen, or not measured).
    pub fault_share: u16,
    /// The thread's `PyThreadState` address (0 if none).
    pub tstate: u64,
    /// When the sample is in libc or libm: the return address into their caller (0: none
    /// found, or elsewhere), which tells the interpreter's own calls from an extension's.
    pub caller: u64,
}

/// [`Kind::Code`]: a code object's description; its strings and line table follow in
/// [`Kind::Data`] records (filename, qualname, line table, concatenated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Code {
    /// The id frames use for it.
    pub id: u32,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// Bytes per character of the file name (0 none, 1 latin-1, 2 UCS-2, 4 UCS-4).
    pub filename_kind: u8,
    /// Bytes per character of the qualified name.
    pub qualname_kind: u8,
    /// Bytes of file name that follow.
    pub filename_len: u32,
    /// Bytes of qualified name that follow.
    pub qualname_len: u32,
    /// Bytes of line table that follow.
    pub linetable_len: u64,
    /// The code object's address.
    pub address: u64,
}

/// [`Kind::ThreadStart`]: a thread started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStart {
    /// Its kernel thread id.
    pub tid: u32,
    /// Its `pthread_self()`.
    pub pthread: u64,
    /// The address of the thread's "in a timed wait since" word (0: none), which the
    /// collector reads to leave a wait the thread times itself out of its own looks.
    pub waiting_cell: u64,
}

/// [`Kind::Alloc`]: a sampled allocation; `depth` [`Kind::Frames`] words follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Alloc {
    /// The block's address.
    pub addr: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Bytes it stands for (Poisson weight).
    pub weight: u64,
    /// Python frames that follow.
    pub depth: u32,
    /// [`alloc_flags`].
    pub flags: u32,
}

/// [`Kind::Copy`]: a sampled copy (`memcpy` family); `depth` [`Kind::Frames`] words follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemCopy {
    /// Bytes copied.
    pub bytes: u64,
    /// Bytes it stands for.
    pub weight: u64,
    /// Python frames that follow.
    pub depth: u32,
}

/// [`Kind::Region`]: a region of the program's own marking began, ended, or reached a new
/// heap high.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    /// Its id, unique in the process.
    pub id: u64,
    /// One of [`region_phase`].
    pub phase: u8,
    /// What the program waits for from the collector at the end: one of [`region_report`].
    pub report: u8,
    /// Bytes of name that follow (begin phase).
    pub name_len: u32,
    /// The exact heap at this moment.
    pub heap: i64,
    /// The exact highest heap since the region began (end and peak phases).
    pub peak: i64,
}

/// One Python frame of a [`Kind::Frames`] record: `code_id << 32 | lasti`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// The code object's id (see [`Kind::Code`]; [`UNKNOWN_CODE`] if none).
    pub code_id: u32,
    /// Instruction offset in 2-byte code units (-1: not started).
    pub lasti: i32,
}

impl Frame {
    /// The frame as one payload word.
    pub const fn word(self) -> u64 {
        (self.code_id as u64) << 32 | self.lasti as u32 as u64
    }

    /// The frame packed in `word`.
    pub const fn from_word(word: u64) -> Frame {
        Frame {
            code_id: (word >> 32) as u32,
            lasti: word as u32 as i32,
        }
    }
}

impl Record {
    pub(crate) fn with(kind: Kind, tid: u32, ts_ns: u64, words: [u64; 5]) -> Record {
        let [a, b, c, d, e] = words;
        Record {
            a,
            b,
            c,
            d,
            e,
            ..Record::new(kind, tid, ts_ns)
        }
    }

    /// The payload words, when the record is of `kind`.
    pub(crate) fn words_of(&self, kind: Kind) -> Option<[u64; 5]> {
        (self.kind == kind as u16).then_some([self.a, self.b, self.c, self.d, self.e])
    }

    /// A [`Kind::ProcessStart`] record.
    pub fn process_start(tid: u32, ts_ns: u64, p: ProcessStart) -> Record {
        let words = [p.pid as u64, p.ppid as u64, p.forked as u64, 0, 0];
        Record::with(Kind::ProcessStart, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::ProcessStart`] record.
    pub fn as_process_start(&self) -> Option<ProcessStart> {
        let [a, b, c, ..] = self.words_of(Kind::ProcessStart)?;
        Some(ProcessStart {
            pid: a as u32,
            ppid: b as u32,
            forked: c != 0,
        })
    }

    /// A [`Kind::ProcessExit`] record.
    pub fn process_exit(tid: u32, ts_ns: u64, p: ProcessExit) -> Record {
        let words = [p.code as u64, p.immediate as u64, 0, 0, 0];
        Record::with(Kind::ProcessExit, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::ProcessExit`] record.
    pub fn as_process_exit(&self) -> Option<ProcessExit> {
        let [a, b, ..] = self.words_of(Kind::ProcessExit)?;
        Some(ProcessExit {
            code: a as i64,
            immediate: b != 0,
        })
    }

    /// A [`Kind::Sample`] record.
    pub fn sample(tid: u32, ts_ns: u64, s: Sample) -> Record {
        let c = u64::from(s.depth.min(0xffff) as u16)
            | u64::from(s.fault_share) << 16
            | (s.flags as u64) << 32;
        Record::with(
            Kind::Sample,
            tid,
            ts_ns,
            [s.ip, s.weight_ns, c, s.tstate, s.caller],
        )
    }

    /// The payload of a [`Kind::Sample`] record.
    pub fn as_sample(&self) -> Option<Sample> {
        let [a, b, c, d, e] = self.words_of(Kind::Sample)?;
        Some(Sample {
            ip: a,
            weight_ns: b,
            depth: u32::from(c as u16),
            flags: (c >> 32) as u32,
            fault_share: (c >> 16) as u16,
            tstate: d,
            caller: e,
        })
    }

    /// A [`Kind::Code`] record.
    pub fn code(tid: u32, ts_ns: u64, c: Code) -> Record {
        let b = c.firstlineno as u32 as u64
            | (c.filename_kind as u64) << 32
            | (c.qualname_kind as u64) << 40;
        let lens = c.filename_len as u64 | (c.qualname_len as u64) << 32;
        let words = [c.id as u64, b, lens, c.linetable_len, c.address];
        Record::with(Kind::Code, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::Code`] record.
    pub fn as_code(&self) -> Option<Code> {
        let [a, b, c, d, e] = self.words_of(Kind::Code)?;
        Some(Code {
            id: a as u32,
            firstlineno: b as u32 as i32,
            filename_kind: (b >> 32) as u8,
            qualname_kind: (b >> 40) as u8,
            filename_len: c as u32,
            qualname_len: (c >> 32) as u32,
            linetable_len: d,
            address: e,
        })
    }

    /// A [`Kind::Data`] record carrying `bytes` (little-endian words).
    pub fn data(bytes: &[u8; DATA_BYTES]) -> Record {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Record::with(
            Kind::Data,
            0,
            0,
            [word(0), word(1), word(2), word(3), word(4)],
        )
    }

    /// The bytes of a [`Kind::Data`] record.
    pub fn as_data(&self) -> Option<[u8; DATA_BYTES]> {
        let words = self.words_of(Kind::Data)?;
        let mut out = [0u8; DATA_BYTES];
        for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        Some(out)
    }

    /// A [`Kind::Frames`] record of up to [`FRAMES_PER_RECORD`] frames (more are ignored;
    /// unused words are zero).
    pub fn frames(tid: u32, frames: &[Frame]) -> Record {
        let mut words = [0u64; FRAMES_PER_RECORD];
        for (word, frame) in words.iter_mut().zip(frames) {
            *word = frame.word();
        }
        Record::with(Kind::Frames, tid, 0, words)
    }

    /// The [`FRAMES_PER_RECORD`] frame slots of a [`Kind::Frames`] record (how many are used
    /// is told by the head record).
    pub fn as_frames(&self) -> Option<[Frame; FRAMES_PER_RECORD]> {
        Some(self.words_of(Kind::Frames)?.map(Frame::from_word))
    }

    /// A [`Kind::ThreadStart`] record.
    pub fn thread_start(tid: u32, ts_ns: u64, t: ThreadStart) -> Record {
        Record::with(
            Kind::ThreadStart,
            tid,
            ts_ns,
            [t.tid as u64, t.pthread, t.waiting_cell, 0, 0],
        )
    }

    /// The payload of a [`Kind::ThreadStart`] record.
    pub fn as_thread_start(&self) -> Option<ThreadStart> {
        let [a, b, c, ..] = self.words_of(Kind::ThreadStart)?;
        Some(ThreadStart {
            tid: a as u32,
            pthread: b,
            waiting_cell: c,
        })
    }

    /// A [`Kind::Alloc`] record.
    pub fn alloc(tid: u32, ts_ns: u64, a: Alloc) -> Record {
        let d = a.depth as u64 | (a.flags as u64) << 32;
        Record::with(Kind::Alloc, tid, ts_ns, [a.addr, a.size, a.weight, d, 0])
    }

    /// A [`Kind::Alloc`] record of the `size` bytes at `addr` left of the sampled mapping that
    /// started at `from` (flags `MAPPED | CUT`, no stack, weight 0: the collector gives it its
    /// share of the mapping's).
    pub fn mapped_cut(tid: u32, ts_ns: u64, addr: u64, size: u64, from: u64) -> Record {
        let d = ((alloc_flags::MAPPED | alloc_flags::CUT) as u64) << 32;
        Record::with(Kind::Alloc, tid, ts_ns, [addr, size, 0, d, from])
    }

    /// The start of the mapping a [`Record::mapped_cut`] record is left of.
    pub fn cut_from(&self) -> Option<u64> {
        Some(self.words_of(Kind::Alloc)?[4])
    }

    /// The payload of a [`Kind::Alloc`] record.
    pub fn as_alloc(&self) -> Option<Alloc> {
        let [a, b, c, d, _] = self.words_of(Kind::Alloc)?;
        Some(Alloc {
            addr: a,
            size: b,
            weight: c,
            depth: d as u32,
            flags: (d >> 32) as u32,
        })
    }

    /// A [`Kind::Free`] record of the sampled block at `addr`.
    pub fn free(tid: u32, ts_ns: u64, addr: u64) -> Record {
        Record::with(Kind::Free, tid, ts_ns, [addr, 0, 0, 0, 0])
    }

    /// The address of a [`Kind::Free`] record.
    pub fn as_free(&self) -> Option<u64> {
        Some(self.words_of(Kind::Free)?[0])
    }

    /// A [`Kind::InterpreterCode`] record: `bytes` at `start` made executable by the
    /// interpreter (`made`), or unmapped.
    pub fn interpreter_code(tid: u32, ts_ns: u64, start: u64, bytes: u64, made: bool) -> Record {
        Record::with(
            Kind::InterpreterCode,
            tid,
            ts_ns,
            [start, bytes, made as u64, 0, 0],
        )
    }

    /// `(start, bytes, made)` of a [`Kind::InterpreterCode`] record.
    pub fn as_interpreter_code(&self) -> Option<(u64, u64, bool)> {
        let [start, bytes, made, ..] = self.words_of(Kind::InterpreterCode)?;
        Some((start, bytes, made != 0))
    }

    /// A [`Kind::PeakMark`] record: the heap reached `heap_bytes`.
    pub fn peak_mark(tid: u32, ts_ns: u64, heap_bytes: u64) -> Record {
        Record::with(Kind::PeakMark, tid, ts_ns, [heap_bytes, 0, 0, 0, 0])
    }

    /// The heap bytes of a [`Kind::PeakMark`] record.
    pub fn as_peak_mark(&self) -> Option<u64> {
        Some(self.words_of(Kind::PeakMark)?[0])
    }

    /// A [`Kind::MappedMark`] record: the process's anonymous mappings reached `mapped_bytes`.
    pub fn mapped_mark(tid: u32, ts_ns: u64, mapped_bytes: u64) -> Record {
        Record::with(Kind::MappedMark, tid, ts_ns, [mapped_bytes, 0, 0, 0, 0])
    }

    /// A [`Kind::SigprofMask`] record: the writing thread now blocks SIGPROF (or not); when it
    /// unblocks it, `cpu_ns` is the CPU it used while it was blocked (0 when it blocks it).
    pub fn sigprof_mask(tid: u32, ts_ns: u64, blocked: bool, cpu_ns: u64) -> Record {
        Record::with(
            Kind::SigprofMask,
            tid,
            ts_ns,
            [blocked as u64, cpu_ns, 0, 0, 0],
        )
    }

    /// Whether a [`Kind::SigprofMask`] record says SIGPROF is blocked now, and the CPU the
    /// thread used while it was blocked (an unblocking record's).
    pub fn as_sigprof_mask(&self) -> Option<(bool, u64)> {
        let [a, b, ..] = self.words_of(Kind::SigprofMask)?;
        Some((a != 0, b))
    }

    /// The mapped bytes of a [`Kind::MappedMark`] record.
    pub fn as_mapped_mark(&self) -> Option<u64> {
        Some(self.words_of(Kind::MappedMark)?[0])
    }

    /// A [`Kind::Copy`] record.
    pub fn copy(tid: u32, ts_ns: u64, c: MemCopy) -> Record {
        Record::with(
            Kind::Copy,
            tid,
            ts_ns,
            [c.bytes, c.weight, c.depth as u64, 0, 0],
        )
    }

    /// A [`Kind::Region`] record.
    pub fn region(tid: u32, ts_ns: u64, r: Region) -> Record {
        let b = r.phase as u64 | (r.report as u64) << 8 | (r.name_len as u64) << 32;
        let words = [r.id, b, r.heap as u64, r.peak as u64, 0];
        Record::with(Kind::Region, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::Region`] record.
    pub fn as_region(&self) -> Option<Region> {
        let [a, b, c, d, _] = self.words_of(Kind::Region)?;
        Some(Region {
            id: a,
            phase: b as u8,
            report: (b >> 8) as u8,
            name_len: (b >> 32) as u32,
            heap: c as i64,
            peak: d as i64,
        })
    }

    /// The payload of a [`Kind::Copy`] record.
    pub fn as_copy(&self) -> Option<MemCopy> {
        let [a, b, c, ..] = self.words_of(Kind::Copy)?;
        Some(MemCopy {
            bytes: a,
            weight: b,
            depth: c as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Extreme values in every field: each round-trips, and only through its own kind.
    #[test]
    fn every_kind_round_trips_through_its_record() {
        let (tid, ts) = (u32::MAX - 1, u64::MAX - 2);
        let start = ProcessStart {
            pid: u32::MAX,
            ppid: 1,
            forked: true,
        };
        let r = Record::process_start(tid, ts, start);
        assert_eq!(
            (r.kind, r.tid, r.ts_ns),
            (Kind::ProcessStart as u16, tid, ts)
        );
        assert_eq!(r.as_process_start(), Some(start));
        assert_eq!(r.as_sample(), None, "another kind's accessor refuses it");
        for code in [i32::MIN as i64, -1, 0, 255, i32::MAX as i64] {
            let exit = ProcessExit {
                code,
                immediate: code < 0,
            };
            assert_eq!(
                Record::process_exit(tid, ts, exit).as_process_exit(),
                Some(exit)
            );
        }
        let sample = Sample {
            ip: u64::MAX,
            weight_ns: 1 << 40,
            depth: 0xffff,
            flags: sample_flags::TRUNCATED | sample_flags::NO_PYTHON,
            fault_share: 10_000,
            tstate: 0x7fff_0000_1000,
            caller: u64::MAX,
        };
        assert_eq!(Record::sample(tid, ts, sample).as_sample(), Some(sample));
        for made in [true, false] {
            let r = Record::interpreter_code(tid, ts, u64::MAX - 4096, 1 << 40, made);
            assert_eq!(
                r.as_interpreter_code(),
                Some((u64::MAX - 4096, 1 << 40, made))
            );
            assert_eq!(r.as_sample(), None);
        }
        let code = Code {
            id: UNKNOWN_CODE - 1,
            firstlineno: -5,
            filename_kind: 4,
            qualname_kind: 2,
            filename_len: u32::MAX,
            qualname_len: 7,
            linetable_len: u64::MAX,
            address: 0xdead_beef,
        };
        assert_eq!(Record::code(tid, ts, code).as_code(), Some(code));
        let bytes: [u8; DATA_BYTES] = core::array::from_fn(|i| (i * 7) as u8);
        let data = Record::data(&bytes);
        assert_eq!(data.as_data(), Some(bytes));
        assert_eq!(data.a, u64::from_le_bytes([0, 7, 14, 21, 28, 35, 42, 49]));
        let frames = [
            Frame {
                code_id: 3,
                lasti: -1,
            },
            Frame {
                code_id: UNKNOWN_CODE,
                lasti: i32::MAX,
            },
        ];
        let packed = Record::frames(tid, &frames).as_frames().unwrap();
        assert_eq!(packed[..2], frames);
        assert_eq!(packed[2..], [Frame::from_word(0); 3]);
        let thread = ThreadStart {
            tid: 9,
            pthread: u64::MAX,
            waiting_cell: 0x7f00_0000_1000,
        };
        assert_eq!(
            Record::thread_start(tid, ts, thread).as_thread_start(),
            Some(thread)
        );
        let alloc = Alloc {
            addr: 0x1000,
            size: u64::MAX,
            weight: 1,
            depth: 7,
            flags: alloc_flags::PYTHON,
        };
        assert_eq!(Record::alloc(tid, ts, alloc).as_alloc(), Some(alloc));
        assert_eq!(Record::free(tid, ts, 0x1000).as_free(), Some(0x1000));
        assert_eq!(
            Record::peak_mark(tid, ts, 1 << 50).as_peak_mark(),
            Some(1 << 50)
        );
        let copy = MemCopy {
            bytes: 1 << 30,
            weight: 1 << 31,
            depth: 128,
        };
        assert_eq!(Record::copy(tid, ts, copy).as_copy(), Some(copy));
        for phase in [region_phase::BEGIN, region_phase::END, region_phase::PEAK] {
            let region = Region {
                id: u64::MAX,
                phase,
                report: if phase == region_phase::END {
                    region_report::PAGE
                } else {
                    region_report::NONE
                },
                name_len: MAX_REGION_NAME as u32,
                heap: -5,
                peak: i64::MAX,
            };
            assert_eq!(Record::region(tid, ts, region).as_region(), Some(region));
        }
    }

    /// The layout the format documents on [`Kind`], word by word (what a channel written by
    /// another build of the preload library holds).
    #[test]
    fn words_are_where_the_format_says() {
        let r = Record::sample(
            1,
            2,
            Sample {
                ip: 10,
                weight_ns: 20,
                depth: 3,
                flags: 4,
                tstate: 50,
                caller: 60,
                fault_share: 7,
            },
        );
        assert_eq!(
            [r.a, r.b, r.c, r.d, r.e],
            [10, 20, 3 | 7 << 16 | 4 << 32, 50, 60]
        );
        let r = Record::alloc(
            1,
            2,
            Alloc {
                addr: 10,
                size: 20,
                weight: 30,
                depth: 4,
                flags: 1,
            },
        );
        assert_eq!([r.a, r.b, r.c, r.d], [10, 20, 30, 4 | 1 << 32]);
        let r = Record::code(
            1,
            2,
            Code {
                id: 3,
                firstlineno: 12,
                filename_kind: 1,
                qualname_kind: 1,
                filename_len: 5,
                qualname_len: 1,
                linetable_len: 2,
                address: 9,
            },
        );
        assert_eq!(
            [r.a, r.b, r.c, r.d, r.e],
            [3, 12 | 1 << 32 | 1 << 40, 5 | 1 << 32, 2, 9]
        );
        let f = Frame {
            code_id: 2,
            lasti: 6,
        };
        assert_eq!(f.word(), 2 << 32 | 6);
    }
}
