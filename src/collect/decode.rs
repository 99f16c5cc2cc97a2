//! Reassembling multi-record events of one channel: a CPU sample and its frame records, a
//! code object and its data records. Records of one event are contiguous (reserved as a
//! group by the writer), so a small state machine per channel is enough.
//!
//! Records are untrusted input (the profiled program can write anything into its channel):
//! every count and length is checked against the format's limits ([`MAX_FRAMES`],
//! [`MAX_BLOB_BYTES`]) before anything is allocated, byte counts and sample weights against
//! what any real process could produce ([`MAX_RECORD_BYTES`], [`MAX_SAMPLE_NS`]), and a record
//! that declares more is dropped and counted in [`Decoded::malformed`].
//!
//! What it makes goes into the channel's event store ([`Decoded`], `collect::events`), which
//! knows nothing of records.

use std::collections::HashMap;

use mlprof_wire::{
    alloc_flags, region_phase, sample_flags, Kind, Record, FRAMES_PER_RECORD, MAX_BLOB_BYTES,
    MAX_FRAMES, MAX_REGION_NAME,
};

use super::events::{Decoded, MAX_REGIONS};
use crate::recording::{AllocSample, CodeInfo, CopySample, CpuSample, RegionSpan};

/// How many of the newest regions an end or peak record is matched against (regions nest at
/// most 32 deep in the writer, and other threads' regions may interleave).
const MAX_DEPTH_SEARCHED: usize = 256;

/// Largest byte count one record may carry (an allocation's size or weight, a copy, a heap
/// mark): 2^48, more than any address space. Larger is corruption.
pub const MAX_RECORD_BYTES: u64 = 1 << 48;
/// Largest CPU time one sample may stand for: 2^40 ns (about 18 minutes). Larger is corruption.
pub const MAX_SAMPLE_NS: u64 = 1 << 40;
/// Longest wait one timed-wait sample may stand for: 2^50 ns (about 13 days). Larger is
/// corruption.
pub const MAX_WAIT_NS: u64 = 1 << 50;
enum Pending {
    None,
    Sample {
        sample: CpuSample,
        frames_left: usize,
    },
    Alloc {
        alloc: AllocSample,
        frames_left: usize,
    },
    Copy {
        copy: CopySample,
        frames_left: usize,
    },
    Code {
        id: u32,
        info: CodeInfo,
        lens: [usize; 3],
        bytes: Vec<u8>,
    },
    Region {
        span: RegionSpan,
        len: usize,
        bytes: Vec<u8>,
    },
    Gpu {
        call: super::gpu_calls::Call,
        frames: Vec<(u32, i32)>,
        frames_left: usize,
    },
    /// A kernel's name (`mlprof_wire::Kind::GpuKernelName`), waiting for its bytes.
    KernelName {
        key: u64,
        len: usize,
        bytes: Vec<u8>,
    },
}

/// The decoder state of one channel.
pub struct Decoder {
    pending: Pending,
    /// Each thread's latest CPU sample: where a tail sample's time goes
    /// ([`sample_flags::TAIL`]). At most [`MAX_LAST_SAMPLES`] threads.
    last_cpu: HashMap<u32, CpuSample>,
    /// Everything decoded so far.
    pub out: Decoded,
}

/// Most threads whose latest CPU sample is kept for a tail ([`Decoder::last_cpu`]).
const MAX_LAST_SAMPLES: usize = 1 << 16;

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            pending: Pending::None,
            last_cpu: HashMap::new(),
            out: Decoded::default(),
        }
    }
}

impl Decoder {
    /// Feed one record; `launch_ns` makes sample times relative to launch.
    pub fn feed(&mut self, r: &Record, launch_ns: u64) {
        match Kind::from_u16(r.kind) {
            Some(Kind::Frames) => self.frames(r),
            Some(Kind::Data) => self.data(r),
            kind => {
                self.finish_pending();
                let t_ns = r.ts_ns.saturating_sub(launch_ns);
                self.out.newest_ns = self.out.newest_ns.max(t_ns);
                match kind {
                    Some(Kind::Sample) => self.sample(r, launch_ns),
                    Some(Kind::Code) => self.code(r),
                    Some(Kind::ThreadStart) => {
                        if let Some(t) = r.as_thread_start() {
                            self.out.threads.push((t.tid, t.pthread));
                            if t.waiting_cell != 0 {
                                self.out.waiting_cells.insert(t.tid, t.waiting_cell);
                            }
                        }
                    }
                    Some(Kind::Alloc) => self.alloc(r, t_ns),
                    Some(Kind::Copy) => self.copy(r, t_ns),
                    Some(Kind::Free) => {
                        if let Some(addr) = r.as_free() {
                            self.out.free(addr, t_ns);
                        }
                    }
                    Some(Kind::PeakMark) => match r.as_peak_mark() {
                        Some(heap) if heap <= MAX_RECORD_BYTES => {
                            self.out.peak_marks.push((t_ns, heap))
                        }
                        _ => self.out.malformed += 1,
                    },
                    Some(Kind::Region) => self.region(r, t_ns),
                    Some(Kind::SigprofMask) => match r.as_sigprof_mask() {
                        Some((blocked, cpu_ns)) => {
                            self.out.sigprof_mask(r.tid, blocked, t_ns, cpu_ns)
                        }
                        None => self.out.malformed += 1,
                    },
                    Some(Kind::GpuAlloc | Kind::GpuCopy | Kind::GpuLaunch) => self.gpu(r, t_ns),
                    Some(
                        Kind::GpuKernel
                        | Kind::GpuCorrelation
                        | Kind::GpuKernelName
                        | Kind::GpuTrace,
                    ) => self.gpu_kernels(r, launch_ns),
                    Some(Kind::GpuFree) => match r.as_gpu_free() {
                        Some(f) => self.out.gpu.free(f.addr, f.space, t_ns),
                        None => self.out.malformed += 1,
                    },
                    Some(Kind::InterpreterCode) => match r.as_interpreter_code() {
                        Some((start, bytes, made)) => {
                            self.out.interpreter_code(start, bytes, made, t_ns)
                        }
                        None => self.out.malformed += 1,
                    },
                    Some(Kind::MappedMark) => match r.as_mapped_mark() {
                        Some(bytes) if bytes <= MAX_RECORD_BYTES => {
                            self.out.mapped_marks.push((t_ns, bytes))
                        }
                        _ => self.out.malformed += 1,
                    },
                    _ => {}
                }
            }
        }
    }

    fn sample(&mut self, r: &Record, launch_ns: u64) {
        let Some(s) = r.as_sample() else { return };
        let Some(depth) = self.depth(s.depth) else {
            return;
        };
        let t_ns = r.ts_ns.saturating_sub(launch_ns);
        if s.flags & sample_flags::TAIL != 0 {
            if depth == 0 {
                self.tail(r.tid, s.weight_ns, t_ns);
            } else {
                // A tail has no frames: one that says it has is not believed (nor are the
                // frames that follow it).
                self.out.malformed += 1;
            }
            return;
        }
        // WAITING is the collector's own flag: a channel that sends it is not believed. A
        // timed wait (WAITED) is off-CPU time, so it is WAITING too, and lasted no longer
        // than the run so far.
        let (caller, s) = if s.flags & sample_flags::WAITED != 0 {
            (
                0,
                mlprof_wire::Sample {
                    fault_share: 0,
                    ..s
                },
            )
        } else {
            (s.caller, s)
        };
        let (weight_ns, flags, ip) = if s.flags & sample_flags::WAITED != 0 {
            if s.weight_ns > MAX_WAIT_NS {
                self.out.malformed += 1;
                return;
            }
            (s.weight_ns.min(t_ns), s.flags | sample_flags::WAITING, 0)
        } else {
            if s.weight_ns > MAX_SAMPLE_NS {
                self.out.malformed += 1;
                return;
            }
            (s.weight_ns, s.flags & !sample_flags::WAITING, s.ip)
        };
        let sample = CpuSample {
            t_ns,
            tid: r.tid,
            ip,
            weight_ns,
            flags,
            frames: Vec::with_capacity(depth),
            caller,
            fault_ns: (weight_ns as u128 * u128::from(s.fault_share.min(10_000)) / 10_000) as u64,
        };
        self.pending = Pending::Sample {
            sample,
            frames_left: depth,
        };
        if depth == 0 {
            self.finish_pending();
        }
    }

    /// A thread's CPU time since its last sample, sent as it or its process ended: it goes
    /// where the thread was last sampled. A thread never sampled keeps its time too: on a
    /// machine busier than its cores the kernel's CPU timer may not fire in a thread's whole
    /// life (0.4 s of CPU at 10 Hz beside 4 busy loops), so it is not "less than an interval".
    /// It becomes a sample with no frame, which goes where a thread without Python's does
    /// (the line its process's Python threads were on then: `model::pooljoin`).
    fn tail(&mut self, tid: u32, weight_ns: u64, t_ns: u64) {
        if weight_ns > MAX_SAMPLE_NS {
            self.out.malformed += 1;
            return;
        }
        let sample = match self.last_cpu.remove(&tid) {
            Some(mut last) => {
                last.t_ns = t_ns.max(last.t_ns);
                last.weight_ns = weight_ns;
                last.fault_ns = 0;
                last
            }
            None => CpuSample {
                t_ns,
                tid,
                ip: 0,
                weight_ns,
                flags: 0,
                frames: Vec::new(),
                caller: 0,
                fault_ns: 0,
            },
        };
        self.out.samples.push(sample);
    }

    /// Keep `s` as its thread's latest CPU sample, in the thread's slot of
    /// [`Decoder::last_cpu`] (its frames copied into the slot's own vector: no allocation
    /// per sample once a thread has one).
    fn remember_last(&mut self, s: &CpuSample) {
        let room = self.last_cpu.len() < MAX_LAST_SAMPLES;
        match self.last_cpu.get_mut(&s.tid) {
            Some(last) => {
                last.frames.clone_from(&s.frames);
                (last.t_ns, last.ip, last.weight_ns) = (s.t_ns, s.ip, s.weight_ns);
                (last.flags, last.caller, last.fault_ns) = (s.flags, s.caller, s.fault_ns);
            }
            None if room => {
                self.last_cpu.insert(s.tid, s.clone());
            }
            None => {}
        }
    }

    fn alloc(&mut self, r: &Record, t_ns: u64) {
        let Some(a) = r.as_alloc() else { return };
        if a.flags & alloc_flags::CUT != 0 {
            let from = r.cut_from().unwrap_or(0);
            self.out.cut_mapping(from, a.addr, a.size, t_ns);
            return;
        }
        let Some(depth) = self.depth(a.depth) else {
            return;
        };
        if a.size > MAX_RECORD_BYTES || a.weight > MAX_RECORD_BYTES {
            self.out.malformed += 1;
            return;
        }
        let alloc = AllocSample {
            t_ns,
            tid: r.tid,
            addr: a.addr,
            size: a.size,
            weight: a.weight,
            flags: a.flags,
            frames: Vec::with_capacity(depth),
            freed_ns: None,
            cut_ns: None,
        };
        self.pending = Pending::Alloc {
            alloc,
            frames_left: depth,
        };
        if depth == 0 {
            self.finish_pending();
        }
    }

    fn copy(&mut self, r: &Record, t_ns: u64) {
        let Some(c) = r.as_copy() else { return };
        let Some(depth) = self.depth(c.depth) else {
            return;
        };
        if c.bytes > MAX_RECORD_BYTES || c.weight > MAX_RECORD_BYTES {
            self.out.malformed += 1;
            return;
        }
        let frames = Vec::with_capacity(depth);
        let copy = CopySample {
            t_ns,
            tid: r.tid,
            bytes: c.bytes,
            weight: c.weight,
            frames,
        };
        self.pending = Pending::Copy {
            copy,
            frames_left: depth,
        };
        if depth == 0 {
            self.finish_pending();
        }
    }

    /// A frame count from a head record, or `None` (counted as malformed) when it is more
    /// than the format allows.
    fn depth(&mut self, declared: u32) -> Option<usize> {
        match usize::try_from(declared) {
            Ok(depth) if depth <= MAX_FRAMES => Some(depth),
            _ => {
                self.out.malformed += 1;
                None
            }
        }
    }

    fn frames(&mut self, r: &Record) {
        let (frames, frames_left) = match &mut self.pending {
            Pending::Sample {
                sample,
                frames_left,
            } => (&mut sample.frames, frames_left),
            Pending::Alloc { alloc, frames_left } => (&mut alloc.frames, frames_left),
            Pending::Copy { copy, frames_left } => (&mut copy.frames, frames_left),
            Pending::Gpu {
                frames,
                frames_left,
                ..
            } => (frames, frames_left),
            _ => {
                self.out.malformed += 1;
                return;
            }
        };
        let Some(sent) = r.as_frames() else { return };
        for frame in sent.into_iter().take((*frames_left).min(FRAMES_PER_RECORD)) {
            frames.push((frame.code_id, frame.lasti));
            *frames_left -= 1;
        }
        if *frames_left == 0 {
            self.finish_pending();
        }
    }

    fn code(&mut self, r: &Record) {
        let Some(c) = r.as_code() else { return };
        let info = CodeInfo {
            address: c.address,
            firstlineno: c.firstlineno,
            filename_kind: c.filename_kind,
            qualname_kind: c.qualname_kind,
            ..CodeInfo::default()
        };
        let declared = [
            c.filename_len as u64,
            c.qualname_len as u64,
            c.linetable_len,
        ];
        if declared.iter().any(|&len| len > MAX_BLOB_BYTES as u64) {
            self.out.malformed += 1;
            return;
        }
        // Each length is at most MAX_BLOB_BYTES (checked above): no overflow, bounded memory.
        let lens = declared.map(|len| len as usize);
        let total: usize = lens.iter().sum();
        self.pending = Pending::Code {
            id: c.id,
            info,
            lens,
            bytes: Vec::with_capacity(total),
        };
        if total == 0 {
            self.finish_pending();
        }
    }

    fn region(&mut self, r: &Record, t_ns: u64) {
        let Some(region) = r.as_region() else { return };
        let sane = |bytes: i64| bytes.unsigned_abs() <= MAX_RECORD_BYTES;
        if !sane(region.heap) || !sane(region.peak) || region.id == 0 {
            self.out.malformed += 1;
            return;
        }
        if matches!(region.phase, region_phase::BEGIN | region_phase::END) {
            // CUDA calls from here on are folded apart from those before (`GpuStore`).
            self.out.gpu.boundary();
        }
        let regions = &mut self.out.regions;
        let losses = &mut self.out.region_losses;
        match region.phase {
            region_phase::BEGIN => {
                let len = region.name_len as usize;
                if len > MAX_REGION_NAME {
                    self.out.malformed += 1;
                    return;
                }
                losses.begins += 1;
                losses.max_id = losses.max_id.max(region.id);
                if regions.len() >= MAX_REGIONS {
                    // Read with its name as any begin, and not kept (`finish_pending`).
                    losses.over_cap += 1;
                }
                let span = RegionSpan {
                    id: region.id,
                    tid: r.tid,
                    begin_ns: t_ns,
                    heap_begin: region.heap,
                    peak: region.heap,
                    ..RegionSpan::default()
                };
                self.pending = Pending::Region {
                    span,
                    len,
                    bytes: Vec::with_capacity(len),
                };
                if len == 0 {
                    self.finish_pending();
                }
            }
            region_phase::END | region_phase::PEAK => {
                losses.max_id = losses.max_id.max(region.id);
                // The region is open and recent: look from the newest.
                let Some(span) = regions
                    .iter_mut()
                    .rev()
                    .take(MAX_DEPTH_SEARCHED)
                    .find(|s| s.id == region.id && s.end_ns.is_none())
                else {
                    // Past the cap, a region's end is one of those left out.
                    if losses.over_cap == 0 {
                        losses.orphan_records += 1;
                        losses.orphan_ends += u64::from(region.phase == region_phase::END);
                    }
                    return;
                };
                span.peak = span.peak.max(region.peak);
                if region.phase == region_phase::PEAK {
                    span.peak_marks.push((t_ns, region.heap));
                } else {
                    span.end_ns = Some(t_ns.max(span.begin_ns));
                    span.heap_end = Some(region.heap);
                    span.report = region.report;
                    if region.report != 0 {
                        self.out.request_report(region.id, region.report);
                    }
                }
            }
            _ => self.out.malformed += 1,
        }
    }

    fn data(&mut self, r: &Record) {
        if let Pending::Region { len, bytes, .. } | Pending::KernelName { len, bytes, .. } =
            &mut self.pending
        {
            let Some(data) = r.as_data() else { return };
            bytes.extend_from_slice(&data);
            if bytes.len() >= *len {
                bytes.truncate(*len);
                self.finish_pending();
            }
            return;
        }
        let Pending::Code { lens, bytes, .. } = &mut self.pending else {
            self.out.malformed += 1;
            return;
        };
        let total: usize = lens.iter().sum();
        let Some(data) = r.as_data() else { return };
        bytes.extend_from_slice(&data);
        if bytes.len() >= total {
            bytes.truncate(total);
            self.finish_pending();
        }
    }

    /// Close the event in progress (also at the end of the stream: a truncated event is kept
    /// with what arrived).
    pub fn finish_pending(&mut self) {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => {}
            Pending::Sample { sample, .. } if sample.flags & sample_flags::WAITED != 0 => {
                self.out.push_timed_wait(sample)
            }
            Pending::Sample { sample, .. } => {
                self.remember_last(&sample);
                self.out.samples.push(sample)
            }
            Pending::Alloc { alloc, .. } if alloc.flags & alloc_flags::MAPPED != 0 => {
                self.out.mapped(alloc);
            }
            Pending::Alloc { alloc, .. } => self.out.alloc(alloc),
            Pending::Copy { copy, .. } => self.out.copies.push(copy),
            Pending::Gpu { call, frames, .. } => self.out.gpu.add(call, frames),
            Pending::Code {
                id,
                mut info,
                lens,
                bytes,
            } => {
                let (name, rest) = bytes.split_at(lens[0].min(bytes.len()));
                let (qual, table) = rest.split_at(lens[1].min(rest.len()));
                info.filename = decode_str(name, info.filename_kind);
                info.qualname = decode_str(qual, info.qualname_kind);
                info.linetable = table.to_vec();
                self.out.by_address.insert(info.address, id);
                self.out.codes.insert(id, info);
            }
            Pending::KernelName { key, bytes, .. } => self.out.gpu.kernel_name(key, &bytes),
            Pending::Region {
                mut span, bytes, ..
            } => {
                if self.out.regions.len() < MAX_REGIONS {
                    span.name = String::from_utf8_lossy(&bytes).into_owned();
                    self.out.regions.push(span);
                }
            }
        }
    }
}

/// A CPython compact string's raw data (1, 2 or 4 bytes per code point) as UTF-8.
pub fn decode_str(raw: &[u8], kind: u8) -> String {
    match kind {
        2 => raw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .map(char_of)
            .collect(),
        4 => raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .map(char_of)
            .collect(),
        _ => raw.iter().map(|&b| b as char).collect(),
    }
}

fn char_of(code: u32) -> char {
    char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
}

mod gpu;
#[cfg(test)]
mod tests;
