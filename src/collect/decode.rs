//! Reassembling multi-record events of one channel: a CPU sample and its frame records, a
//! code object and its data records. Records of one event are contiguous (reserved as a
//! group by the writer), so a small state machine per channel is enough.
//!
//! Records are untrusted input (the profiled program can write anything into its channel):
//! every count and length is checked against the format's limits ([`MAX_FRAMES`],
//! [`MAX_BLOB_BYTES`]) before anything is allocated, byte counts and sample weights against
//! what any real process could produce ([`MAX_RECORD_BYTES`], [`MAX_SAMPLE_NS`]), and a record
//! that declares more is dropped and counted in [`Decoded::malformed`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use mlprof_wire::{
    alloc_flags, region_phase, sample_flags, Kind, Record, FRAMES_PER_RECORD, MAX_BLOB_BYTES,
    MAX_FRAMES, MAX_REGION_NAME,
};

use crate::recording::{AllocGroup, AllocSample, CodeInfo, CopySample, CpuSample, RegionSpan};

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

/// The sampled events of one channel up to a snapshot, shared with the snapshot being made
/// (which only reads them) instead of copied while the collector waits.
#[derive(Clone, Debug, Default)]
pub struct Events {
    /// CPU samples in arrival order.
    pub samples: Vec<CpuSample>,
    /// Sampled allocations, with their free time once freed (as of the snapshot).
    pub allocs: Vec<AllocSample>,
    /// Allocations freed long ago, folded ([`super::compact`]).
    pub alloc_groups: Vec<AllocGroup>,
    /// Sampled copies.
    pub copies: Vec<CopySample>,
    /// Heap peak marks: (ns from launch, heap bytes), rising.
    pub peak_marks: Vec<(u64, u64)>,
    /// Width of the windows old events were merged into (0: none merged yet).
    pub window_ns: u64,
    /// CPU samples (not waiting ones) merged into others.
    pub merged_cpu_samples: u64,
}

/// Decoded events of one channel. Once snapshots are taken ([`Decoded::share`]), `samples`,
/// `allocs`, `copies` and `peak_marks` hold only the events since the last one; the earlier
/// ones are in the shared [`Events`], and [`Decoded::take_events`] returns them all.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    /// CPU samples in arrival order.
    pub samples: Vec<CpuSample>,
    /// Code objects by id.
    pub codes: BTreeMap<u32, CodeInfo>,
    /// Threads seen: (tid, pthread_self).
    pub threads: Vec<(u32, u64)>,
    /// The address of each thread's "in a timed wait since" word, by tid (threads that sent
    /// one): `collect::waits` leaves a thread out of its look while that word is set.
    pub waiting_cells: HashMap<u32, u64>,
    /// Timed waits the collector's looks found in progress, by tid (`collect::waits`).
    pub open_waits: HashMap<u32, super::waits::OpenWait>,
    /// Records that did not fit the expected sequence or declared more than the format allows
    /// (a bug or a corrupt channel); each is dropped.
    pub malformed: u64,
    /// Code ids by code object address (the newest object at each address).
    pub by_address: HashMap<u64, u32>,
    /// Code objects the collector read itself (ids from 2^31 up).
    pub own_codes: u32,
    /// Sampled allocations, with their free time once freed.
    pub allocs: Vec<AllocSample>,
    /// Sampled copies.
    pub copies: Vec<CopySample>,
    /// Heap peak marks: (ns from launch, heap bytes), rising.
    pub peak_marks: Vec<(u64, u64)>,
    /// Regions the program marked (few: never compacted, copied into each snapshot).
    pub regions: Vec<RegionSpan>,
    /// What became of the region records that could not be kept ([`RegionLosses`]).
    pub region_losses: RegionLosses,
    /// Sampled anonymous mappings and the marks of their highs (few: copied into each
    /// snapshot; pruned by [`Decoded::prune_mappings`]).
    pub mappings: Vec<AllocSample>,
    /// Marks of the highest bytes mapped: (ns from launch, bytes), rising.
    pub mapped_marks: Vec<(u64, u64)>,
    /// Times a thread blocked SIGPROF (`sigprocmask`, `pthread_sigmask`, or started with it
    /// blocked): (tid, from, until it unblocked it), ns from launch, in arrival order.
    pub sigprof_blocks: Vec<(u32, u64, Option<u64>)>,
    /// Index in `mappings` of each sampled mapping still mapped, by address.
    live_mapped: HashMap<u64, usize>,
    /// Regions that ended with a report asked for and not yet handed out
    /// ([`Decoded::take_report_requests`]): (id, report level).
    report_requests: Vec<(u64, u8)>,
    /// Index of each sampled block still live, by address: counted from the first allocation
    /// (in `shared`, then in `allocs`).
    live: HashMap<u64, usize>,
    /// The events up to the last snapshot.
    shared: Arc<Events>,
    /// Frees of allocations in `shared` since the last snapshot: (index, time).
    shared_frees: Vec<(usize, u64)>,
    /// Each thread's clocks at the collector's last look at it (`collect::waits`).
    pub clocks: HashMap<u32, super::waits::ThreadClocks>,
    /// Each thread's run-queue delay per stretch of time, as the looks read it: (slot start,
    /// tid) to ns (`ChannelSummary::queued`).
    pub queued: BTreeMap<(u64, u32), u64>,
    /// Index in `samples` of each thread's latest waiting sample ([`Decoded::push_waiting`]).
    waiting_at: HashMap<u32, usize>,
    /// Time of the newest event decoded (ns from launch).
    pub newest_ns: u64,
    /// Events held after the last compaction ([`Decoded::compact_if_due`]).
    held_after_compaction: usize,
}

/// Scale each thread's looked-at waiting samples so that they add up to no more than the time
/// the kernel says it was blocked (`collect::waits`, from the first look on) less the waits the
/// thread timed itself in that time ([`sample_flags::WAITED`], exact, never scaled): the looks
/// come more often while threads block, so their intervals overstate the waiting. (A timed
/// wait includes the time the thread then queued for a CPU, which the blocked time does not:
/// on a loaded machine the looks may be scaled a little low.)
fn scale_waiting(samples: &mut [CpuSample], clocks: &HashMap<u32, super::waits::ThreadClocks>) {
    let looked =
        |s: &CpuSample| s.flags & sample_flags::WAITING != 0 && s.flags & sample_flags::WAITED == 0;
    let mut sampled: HashMap<u32, u64> = HashMap::new();
    let mut timed: HashMap<u32, u64> = HashMap::new();
    for s in samples.iter() {
        if looked(s) {
            *sampled.entry(s.tid).or_default() += s.weight_ns;
        } else if s.flags & sample_flags::WAITED != 0
            && clocks.get(&s.tid).is_some_and(|c| s.t_ns >= c.first_ns)
        {
            *timed.entry(s.tid).or_default() += s.weight_ns;
        }
    }
    for s in samples.iter_mut().filter(|s| looked(s)) {
        let (Some(c), Some(&total)) = (clocks.get(&s.tid), sampled.get(&s.tid)) else {
            continue;
        };
        let blocked = c
            .blocked_ns
            .saturating_sub(timed.get(&s.tid).copied().unwrap_or(0));
        if blocked < total {
            s.weight_ns = (s.weight_ns as u128 * blocked as u128 / total as u128) as u64;
        }
    }
}

/// Sampled mappings held before the unmapped ones are pruned.
const MAPPINGS_KEPT: usize = 10_000;

/// Events held before the first compaction: short runs are never compacted.
const COMPACT_FROM: usize = 100_000;

/// [`COMPACT_FROM`], or the number in `MLPROF_COMPACT_EVENTS` (for tests that need merged
/// events from a short run).
fn compact_from() -> usize {
    static FROM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *FROM.get_or_init(|| {
        std::env::var("MLPROF_COMPACT_EVENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(COMPACT_FROM)
    })
}

/// Waiting samples of one thread with the same stack are merged when they fall in the same
/// window of this many nanoseconds or `t / MERGE_DIVISOR`, whichever is longer, rounded up to a
/// power of two: a thread asleep for hours costs a slowly growing number of samples (about 1000
/// per doubling of the run) instead of 50 a second, and the time of a merged sample is off by
/// less than two thousandths of the run (a timeline bucket is a four-hundredth).
const MERGE_FLOOR_NS: u64 = 20_000_000;
const MERGE_DIVISOR: u64 = 1000;
/// Most frames the pieces of one timed wait hold together ([`Decoded::push_timed_wait`]):
/// 2000 pieces of a 32-frame stack, a wait of an hour in 1.7 s pieces.
const MAX_SPREAD_FRAMES: usize = 1 << 16;

impl Decoded {
    /// Add an off-CPU sample, merged into the thread's previous one when that has the same
    /// stack and falls in the same merge window (weights add up).
    pub fn push_waiting(&mut self, sample: CpuSample) {
        self.newest_ns = self.newest_ns.max(sample.t_ns);
        // A power of two: windows stay aligned while the width grows with the run.
        let width = MERGE_FLOOR_NS
            .max(sample.t_ns / MERGE_DIVISOR)
            .next_power_of_two();
        if let Some(last) = self
            .waiting_at
            .get(&sample.tid)
            .and_then(|&i| self.samples.get_mut(i))
        {
            if last.tid == sample.tid
                && last.flags == sample.flags
                && last.ip == sample.ip
                && last.t_ns / width == sample.t_ns / width
                && last.frames == sample.frames
            {
                last.weight_ns = last.weight_ns.saturating_add(sample.weight_ns);
                return;
            }
        }
        self.waiting_at.insert(sample.tid, self.samples.len());
        self.samples.push(sample);
    }

    /// Add a wait the thread timed itself, stamped at its end: spread over the time it
    /// lasted, one piece per merge window it spans (each stamped at its middle), so that the
    /// timeline and the joining of pool threads to lines see it when it happened. The windows
    /// widen with the run (a thousandth of it), so a wait spans about 1000 of them per doubling
    /// of the run it lasted; the pieces are made wider where that would copy its stack more
    /// than [`MAX_SPREAD_FRAMES`] times over (channel data is untrusted).
    pub fn push_timed_wait(&mut self, sample: CpuSample) {
        // Its own sample: the wait a look found it in is over (one that began later is not).
        if self
            .open_waits
            .get(&sample.tid)
            .is_some_and(|open| open.since_ns <= sample.t_ns)
        {
            self.open_waits.remove(&sample.tid);
        }
        let end = sample.t_ns;
        let mut t = end.saturating_sub(sample.weight_ns);
        let most = (MAX_SPREAD_FRAMES / sample.frames.len().max(1)).max(16) as u64;
        let least = (sample.weight_ns / most).next_power_of_two();
        while t < end {
            let width = MERGE_FLOOR_NS
                .max(t / MERGE_DIVISOR)
                .next_power_of_two()
                .max(least);
            let piece_end = (t / width + 1).saturating_mul(width).min(end);
            self.push_waiting(CpuSample {
                t_ns: t + (piece_end - t) / 2,
                weight_ns: piece_end - t,
                frames: sample.frames.clone(),
                ..sample
            });
            t = piece_end;
        }
    }

    /// Count the timed waits still going on when the collector last looked (their process
    /// ended, or the run did, before they returned): from their start to that look.
    fn close_open_waits(&mut self) {
        let mut open: Vec<(u32, super::waits::OpenWait)> = self.open_waits.drain().collect();
        open.sort_unstable_by_key(|(tid, _)| *tid);
        for (tid, wait) in open {
            self.push_timed_wait(CpuSample {
                t_ns: wait.seen_ns,
                tid,
                ip: 0,
                weight_ns: wait.seen_ns.saturating_sub(wait.since_ns),
                flags: sample_flags::WAITED | sample_flags::WAITING,
                frames: wait.frames,
                caller: 0,
                fault_ns: 0,
            });
        }
    }

    /// Every event decoded so far, for a snapshot: the events since the last call are moved
    /// into the shared [`Events`] and the share is returned. Costs what arrived since the last
    /// call, unless that snapshot still holds its share (then the share is copied once).
    pub fn share(&mut self) -> Arc<Events> {
        let mut shared = std::mem::take(&mut self.shared);
        self.add_to(Arc::make_mut(&mut shared));
        self.shared = shared;
        self.shared.clone()
    }

    /// Every event decoded, in arrival order, with free times (leaves none here); each
    /// thread's waiting samples scaled down to the time it was blocked, where the kernel said.
    pub fn take_events(&mut self) -> Events {
        let mut all = Arc::try_unwrap(std::mem::take(&mut self.shared))
            .unwrap_or_else(|shared| (*shared).clone());
        self.close_open_waits();
        self.add_to(&mut all);
        self.live.clear();
        scale_waiting(&mut all.samples, &self.clocks);
        all
    }

    /// Move the events since the last share, and the frees noted for shared ones, into `all`.
    fn add_to(&mut self, all: &mut Events) {
        for (i, t_ns) in self.shared_frees.drain(..) {
            if let Some(alloc) = all.allocs.get_mut(i) {
                alloc.freed_ns.get_or_insert(t_ns);
            }
        }
        all.samples.append(&mut self.samples);
        self.waiting_at.clear();
        all.allocs.append(&mut self.allocs);
        // Allocation indices (`live`) count from the first: compaction renumbers them all.
        all.copies.append(&mut self.copies);
        all.peak_marks.append(&mut self.peak_marks);
    }

    /// The regions that ended asking for a report since the last call: (id, level).
    pub fn take_report_requests(&mut self) -> Vec<(u64, u8)> {
        std::mem::take(&mut self.report_requests)
    }

    /// Events held (shared and recent).
    fn held(&self) -> usize {
        let s = &self.shared;
        s.samples.len()
            + s.allocs.len()
            + s.alloc_groups.len()
            + s.copies.len()
            + self.samples.len()
            + self.allocs.len()
            + self.copies.len()
    }

    /// Merge old events ([`super::compact`]) once the events held have doubled since the last
    /// time (and number at least [`compact_from`]): each event is merged a bounded number of
    /// times on average. `canon` maps instruction pointers as `compact` says.
    pub fn compact_if_due(&mut self, canon: &mut dyn FnMut(u64) -> u64) {
        let held = self.held();
        if held < compact_from().max(2 * self.held_after_compaction) {
            return;
        }
        self.compact(canon);
    }

    /// Merge old events now.
    pub fn compact(&mut self, canon: &mut dyn FnMut(u64) -> u64) {
        let mut shared = std::mem::take(&mut self.shared);
        let all = Arc::make_mut(&mut shared);
        self.add_to(all);
        super::compact::compact(all, self.newest_ns, canon);
        self.live.clear();
        for (i, a) in all.allocs.iter().enumerate() {
            if a.freed_ns.is_none() {
                self.live.insert(a.addr, i);
            }
        }
        self.shared = shared;
        self.held_after_compaction = self.held();
    }

    /// Note that allocation `i` (counted from the first) was freed at `t_ns`, unless it
    /// already was.
    /// A sampled anonymous mapping.
    fn mapped(&mut self, mapping: AllocSample) {
        if let Some(old) = self.live_mapped.insert(mapping.addr, self.mappings.len()) {
            if let Some(m) = self.mappings.get_mut(old) {
                m.freed_ns.get_or_insert(mapping.t_ns); // its unmapping was not seen
            }
        }
        self.mappings.push(mapping);
        if self.mappings.len() >= 2 * MAPPINGS_KEPT.max(self.live_mapped.len()) {
            self.prune_mappings();
        }
    }

    /// Drop the mappings unmapped before the last mark: no later high can hold them.
    pub fn prune_mappings(&mut self) {
        let last = self.mapped_marks.last().map_or(0, |&(t, _)| t);
        self.mappings
            .retain(|m| m.freed_ns.is_none_or(|f| f > last));
        self.live_mapped = self
            .mappings
            .iter()
            .enumerate()
            .filter(|(_, m)| m.freed_ns.is_none())
            .map(|(i, m)| (m.addr, i))
            .collect();
    }

    fn freed(&mut self, i: usize, t_ns: u64) {
        match i.checked_sub(self.shared.allocs.len()) {
            Some(recent) => {
                if let Some(alloc) = self.allocs.get_mut(recent) {
                    alloc.freed_ns.get_or_insert(t_ns);
                }
            }
            None => self.shared_frees.push((i, t_ns)),
        }
    }
}

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
}

/// Most regions one process image may declare; more are left out, and counted (a program that
/// marks a million regions gets the first ones).
pub const MAX_REGIONS: usize = 100_000;

/// Region records that match no region kept, and what they say about regions lost. A full ring
/// drops a region's begin (with its name) or its end like any record: the end of a region whose
/// begin was dropped then finds no open region, which is the ring's doing, not a malformed
/// record. The collector tells the two apart by the channel's `dropped` counter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegionLosses {
    /// End and peak records of no open region (their begin was dropped, or they are bogus).
    pub orphan_records: u64,
    /// Of those, ends: one per region whose begin was lost.
    pub orphan_ends: u64,
    /// Begins seen, kept or left out beyond [`MAX_REGIONS`].
    pub begins: u64,
    /// Highest region id seen in any region record: ids count regions begun in a process
    /// (from 1 in a process image that is not a fork child), so ids never seen are regions
    /// whose every record was dropped.
    pub max_id: u64,
    /// Begins left out beyond [`MAX_REGIONS`] (their ends and peaks are ignored).
    pub over_cap: u64,
}

impl RegionLosses {
    /// Regions missing from the recording because a full ring dropped their begin: those
    /// whose end arrived alone, or (for a process image that is not a fork child, whose ids
    /// count from 1) every id below the highest seen that began no region.
    pub fn begins_lost(&self, forked: bool) -> u64 {
        let unseen = if forked {
            0
        } else {
            self.max_id.saturating_sub(self.begins)
        };
        unseen.max(self.orphan_ends)
    }
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

/// Most SIGPROF-blocking spans kept per channel ([`Decoder::sigprof_mask`]).
const MAX_SIGPROF_BLOCKS: usize = 4096;

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
    /// A thread blocked or unblocked SIGPROF. At most [`MAX_SIGPROF_BLOCKS`] are kept (a
    /// program that blocks it around every call sends one pair each time; the first ones say
    /// what the report needs).
    fn sigprof_mask(&mut self, tid: u32, blocked: bool, t_ns: u64) {
        let blocks = &mut self.out.sigprof_blocks;
        let open = blocks.iter().rposition(|b| b.0 == tid && b.2.is_none());
        match (blocked, open) {
            (true, None) if blocks.len() < MAX_SIGPROF_BLOCKS => blocks.push((tid, t_ns, None)),
            (false, Some(i)) => blocks[i].2 = Some(t_ns.max(blocks[i].1)),
            _ => {}
        }
    }

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
                            self.free(addr, t_ns);
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
                        Some(blocked) => self.sigprof_mask(r.tid, blocked, t_ns),
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
    /// where the thread was last sampled. A thread never sampled ran for less than an
    /// interval, somewhere unknown: that time stays out, as before tails existed.
    fn tail(&mut self, tid: u32, weight_ns: u64, t_ns: u64) {
        if weight_ns > MAX_SAMPLE_NS {
            self.out.malformed += 1;
            return;
        }
        if let Some(mut last) = self.last_cpu.remove(&tid) {
            last.t_ns = t_ns.max(last.t_ns);
            last.weight_ns = weight_ns;
            last.fault_ns = 0;
            self.out.samples.push(last);
        }
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

    fn free(&mut self, addr: u64, t_ns: u64) {
        if let Some(i) = self.out.live.remove(&addr) {
            self.out.freed(i, t_ns);
        } else if let Some(i) = self.out.live_mapped.remove(&addr) {
            if let Some(m) = self.out.mappings.get_mut(i) {
                m.freed_ns.get_or_insert(t_ns);
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
                        self.out.report_requests.push((region.id, region.report));
                    }
                }
            }
            _ => self.out.malformed += 1,
        }
    }

    fn data(&mut self, r: &Record) {
        if let Pending::Region { len, bytes, .. } = &mut self.pending {
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
            Pending::Alloc { alloc, .. } => {
                // A new block at a live sampled address means its free was not seen (dropped).
                let index = self.out.shared.allocs.len() + self.out.allocs.len();
                if let Some(old) = self.out.live.insert(alloc.addr, index) {
                    self.out.freed(old, alloc.t_ns);
                }
                self.out.allocs.push(alloc);
            }
            Pending::Copy { copy, .. } => self.out.copies.push(copy),
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

#[cfg(test)]
mod tests {
    use super::*;
    use mlprof_wire::{sample_flags, Frame, DATA_BYTES};

    #[test]
    fn a_thread_asleep_for_hours_keeps_a_bounded_number_of_waiting_samples() {
        let mut d = Decoded::default();
        let tick = 20_000_000u64;
        let hours = 2 * 3600 * 1_000_000_000u64;
        let stack = |line: i32| vec![(7u32, line), (3, 40)];
        let mut pushed = 0u64;
        let mut t = 0;
        while t < hours {
            // Thread 1 always waits on one line; thread 2 switches lines every minute.
            for (tid, line) in [(1, 10), (2, 20 + (t / 60_000_000_000) as i32 % 2)] {
                d.push_waiting(CpuSample {
                    t_ns: t,
                    tid,
                    ip: 0,
                    weight_ns: tick,
                    flags: sample_flags::WAITING,
                    frames: stack(line),
                    caller: 0,
                    fault_ns: 0,
                });
                pushed += 1;
            }
            t += tick;
        }
        assert_eq!(pushed, 720_000);
        let kept = d.samples.len();
        assert!(kept < 16_000, "{kept} samples kept of {pushed}");
        let weight: u64 = d.samples.iter().map(|s| s.weight_ns).sum();
        assert_eq!(weight, pushed * tick, "no waiting time lost");
        for tid in [1, 2] {
            let of = |s: &&CpuSample| s.tid == tid;
            let w: u64 = d.samples.iter().filter(of).map(|s| s.weight_ns).sum();
            assert_eq!(w, hours, "thread {tid}");
        }
        // Merged samples never mix stacks, and none strays from its time by more than the
        // merge window (a thousandth of the run).
        for s in &d.samples {
            assert!(s.frames == stack(10) || s.tid == 2);
            let width = MERGE_FLOOR_NS
                .max(s.t_ns / MERGE_DIVISOR)
                .next_power_of_two();
            assert!(
                s.weight_ns <= 2 * width,
                "{} ns merged at {} ns",
                s.weight_ns,
                s.t_ns
            );
        }
    }

    #[test]
    fn a_tail_goes_to_the_latest_of_its_threads_samples() {
        let ms = 1_000_000;
        let stack = |line: i32| [(7u32, line), (3, 40)];
        let mut d = Decoder::default();
        for (t, line) in [(5, 10), (15, 11)] {
            let mut s = record(Kind::Sample);
            (s.a, s.b, s.c) = (0x1000 + line as u64, 10 * ms, 2);
            feed_event(&mut d, s, t * ms, &stack(line));
        }
        let mut tail = Record::new(Kind::Sample, 7, 30 * ms);
        (tail.b, tail.c) = (40 * ms, u64::from(sample_flags::TAIL) << 32);
        d.feed(&tail, 0);
        d.finish_pending();
        let events = d.out.take_events();
        let last = events.samples.last().unwrap();
        assert_eq!(
            (last.t_ns, last.weight_ns, last.ip, &last.frames[..]),
            (30 * ms, 40 * ms, 0x1000 + 11, &stack(11)[..])
        );
    }

    #[test]
    fn a_tail_goes_where_its_thread_was_last_sampled_and_a_stray_one_nowhere() {
        let ms = 1_000_000;
        let stack = |line: i32| [(7u32, line), (3, 40), (2, 12), (1, 5)];
        let mut d = Decoder::default();
        let mut s = record(Kind::Sample);
        (s.a, s.b, s.c) = (0x1000, 10 * ms, 4);
        feed_event(&mut d, s, 5 * ms, &stack(10));
        let tail = |tid: u32, weight: u64, depth: u64| {
            let mut t = Record::new(Kind::Sample, tid, 9 * ms);
            (t.b, t.c) = (weight, depth | u64::from(sample_flags::TAIL) << 32);
            t
        };
        d.feed(&tail(7, 900 * ms, 0), 0);
        // A thread never sampled, and a tail that claims frames: neither is counted.
        d.feed(&tail(8, 50 * ms, 0), 0);
        d.feed(&tail(7, 50 * ms, 3), 0);
        d.finish_pending();
        let malformed = d.out.malformed;
        let events = d.out.take_events();
        let times: Vec<(u64, u64)> = events
            .samples
            .iter()
            .map(|s| (s.t_ns, s.weight_ns))
            .collect();
        assert_eq!(times, [(5 * ms, 10 * ms), (9 * ms, 900 * ms)]);
        assert!(events.samples.iter().all(|s| s.frames == stack(10)));
        assert_eq!(malformed, 1);
    }

    fn record(kind: Kind) -> Record {
        Record::new(kind, 7, 1_000)
    }

    /// Feed one event (head record and its frames) stamped `t_ns`.
    fn feed_event(d: &mut Decoder, mut head: Record, t_ns: u64, frames: &[(u32, i32)]) {
        head.ts_ns = t_ns;
        d.feed(&head, 0);
        for chunk in frames.chunks(FRAMES_PER_RECORD) {
            let mut f = record(Kind::Frames);
            f.ts_ns = t_ns;
            let mut words = [0u64; 5];
            for (w, &(code, lasti)) in words.iter_mut().zip(chunk) {
                *w = (code as u64) << 32 | lasti as u32 as u64;
            }
            (f.a, f.b, f.c, f.d, f.e) = (words[0], words[1], words[2], words[3], words[4]);
            d.feed(&f, 0);
        }
    }

    #[test]
    fn ten_hours_of_churn_keep_a_bounded_number_of_events() {
        let mut d = Decoder::default();
        let ms = 1_000_000u64;
        let end = 10 * 3600 * 1000 * ms;
        let stack = |line: i32| [(7u32, line), (3, 40), (2, 12), (1, 5)];
        let mut identity = |ip: u64| ip;
        let (mut t, mut i, mut addr, mut max_held) = (0u64, 0u64, 0u64, 0usize);
        let mut leaked = 0u64;
        while t < end {
            // Every 10 ms: a CPU sample at one of 8 instructions on one of 3 lines, a sampled
            // temporary freed at once, a copy; every second, a block that is never freed.
            let mut s = record(Kind::Sample);
            (s.a, s.b, s.c) = (0x1000 + i % 8, 10 * ms, 4);
            feed_event(&mut d, s, t, &stack(10 + (i % 3) as i32));
            addr += 64;
            let mut a = record(Kind::Alloc);
            (a.a, a.b, a.c, a.d) = (addr, 64, 1 << 19, 4);
            feed_event(&mut d, a, t, &stack(20));
            let mut free = record(Kind::Free);
            (free.a, free.ts_ns) = (addr, t + ms);
            d.feed(&free, 0);
            let mut c = record(Kind::Copy);
            (c.a, c.b, c.c) = (4096, 1 << 20, 4);
            feed_event(&mut d, c, t, &stack(30));
            if i % 100 == 0 {
                let mut a = record(Kind::Alloc);
                (a.a, a.b, a.c, a.d) = (1 << 40 | i, 64, 1 << 19, 4);
                feed_event(&mut d, a, t, &stack(40));
                leaked += 1;
            }
            d.out.compact_if_due(&mut identity);
            max_held = max_held.max(d.out.held());
            t += 10 * ms;
            i += 1;
        }
        d.finish_pending();
        let live_leaks = leaked as usize;
        // The never-freed blocks stay one by one (the preload's live set bounds them); all
        // else is bounded by windows x distinct stacks.
        assert!(
            max_held < COMPACT_FROM.max(2 * (live_leaks + 40_000)),
            "{max_held} events held at most, {live_leaks} of them live blocks"
        );
        let events = d.out.take_events();
        let cpu: u64 = events.samples.iter().map(|s| s.weight_ns).sum();
        assert_eq!(cpu, i * 10 * ms, "no CPU time lost");
        let copied: u64 = events.copies.iter().map(|c| c.weight).sum();
        assert_eq!(copied, i << 20, "no copied bytes lost");
        let allocated: u64 = events.allocs.iter().map(|a| a.weight).sum::<u64>()
            + events.alloc_groups.iter().map(|g| g.weight).sum::<u64>();
        assert_eq!(allocated, (i + leaked) << 19, "no allocated bytes lost");
        let live = events
            .allocs
            .iter()
            .filter(|a| a.freed_ns.is_none())
            .count();
        assert_eq!(live, live_leaks, "live blocks kept one by one");
        assert!(events.window_ns > 0 && events.window_ns.is_power_of_two());
    }

    #[test]
    fn samples_and_codes_are_reassembled() {
        let mut d = Decoder::default();
        let code = mlprof_wire::Code {
            id: 3,
            firstlineno: 12,
            filename_kind: 1,
            qualname_kind: 1,
            filename_len: 5,
            qualname_len: 1,
            linetable_len: 2,
            address: 0,
        };
        d.feed(&Record::code(7, 1_000, code), 0);
        let mut bytes = [0u8; DATA_BYTES];
        bytes[..8].copy_from_slice(b"a.pyfxy\0");
        d.feed(&Record::data(&bytes), 0);
        let sample = mlprof_wire::Sample {
            ip: 0xdead,
            weight_ns: 10_000,
            depth: 6,
            ..Default::default()
        };
        d.feed(&Record::sample(7, 1_000, sample), 400);
        let frame = |code_id, lasti| Frame { code_id, lasti };
        let first = [
            frame(3, 4),
            frame(3, -1),
            frame(0, 1),
            frame(0, 2),
            frame(0, 3),
        ];
        d.feed(&Record::frames(7, &first), 0);
        d.feed(&Record::frames(7, &[frame(9, 1)]), 0);
        let c = &d.out.codes[&3];
        assert_eq!(
            (c.filename.as_str(), c.qualname.as_str(), c.firstlineno),
            ("a.pyf", "x", 12)
        );
        assert_eq!(c.linetable, b"y\0");
        let sample = &d.out.samples[0];
        assert_eq!(
            (sample.ip, sample.weight_ns, sample.t_ns),
            (0xdead, 10_000, 600)
        );
        assert_eq!(sample.frames.len(), 6);
        assert_eq!(sample.frames[1], (3, -1));
        assert_eq!(sample.frames[5], (9, 1));
        assert_eq!(d.out.malformed, 0);
    }

    #[test]
    fn timed_waits_are_exact_and_only_the_looks_are_scaled() {
        let mut d = Decoder::default();
        let started = mlprof_wire::ThreadStart {
            tid: 7,
            pthread: 1,
            waiting_cell: 0x7000,
        };
        d.feed(&Record::thread_start(7, 0, started), 0);
        assert_eq!(d.out.waiting_cells.get(&7), Some(&0x7000));
        let timed = |weight_ns, flags| mlprof_wire::Sample {
            ip: 0xbad,
            weight_ns,
            depth: 2,
            flags: sample_flags::WAITED | flags,
            tstate: 0,
            caller: 0,
            fault_share: 0,
        };
        let at = [(3u32, 12i32), (3, 40)];
        // Two timed waits of 300 ms at one line, in one merge window: one sample of 600 ms.
        for t in [1_000_000_000u64, 1_001_000_000] {
            feed_event(&mut d, Record::sample(7, t, timed(300_000_000, 0)), t, &at);
        }
        // A CPU sample that claims to be a look is not believed.
        let cpu = mlprof_wire::Sample {
            ip: 0x10,
            weight_ns: 1_000,
            flags: sample_flags::WAITING,
            ..Default::default()
        };
        feed_event(
            &mut d,
            Record::sample(7, 2_000_000_000, cpu),
            2_000_000_000,
            &[],
        );
        // Corrupt waits: longer than the bound (dropped), longer than the run (clamped).
        let t = 3_000_000_000;
        feed_event(
            &mut d,
            Record::sample(7, t, timed(MAX_WAIT_NS + 1, 0)),
            t,
            &at,
        );
        assert_eq!(d.out.malformed, 2, "the head and its frames record");
        feed_event(
            &mut d,
            Record::sample(7, t, timed(MAX_WAIT_NS, 0)),
            t,
            &[(3, 50)],
        );
        d.finish_pending();
        // The looks saw 900 ms of waiting; the kernel says 1 s blocked, of which 0.6 s were
        // timed (and 3 s of the clamped wait): the looks get what is left, here nothing.
        for t in [500_000_000u64, 4_000_000_000] {
            d.out.push_waiting(CpuSample {
                t_ns: t,
                tid: 7,
                ip: 0,
                weight_ns: 450_000_000,
                flags: sample_flags::WAITING,
                frames: vec![(3, 60)],
                caller: 0,
                fault_ns: 0,
            });
        }
        d.out.clocks.insert(
            7,
            super::super::waits::ThreadClocks {
                blocked_ns: 4_000_000_000,
                ..Default::default()
            },
        );
        let events = d.out.take_events();
        let at_line = |line: i32| -> (u64, u32, usize, u64) {
            let of: Vec<&CpuSample> = events
                .samples
                .iter()
                .filter(|s| s.frames.first() == Some(&(3, line)))
                .collect();
            let w = of.iter().map(|s| s.weight_ns).sum();
            let flags = of.iter().fold(0, |f, s| f | s.flags);
            (
                w,
                flags,
                of.len(),
                of.iter().map(|s| s.ip).max().unwrap_or(0),
            )
        };
        let both = sample_flags::WAITED | sample_flags::WAITING;
        // Each wait spread over the 33.5 ms merge windows it spans (10 each: made to overlap,
        // they do not merge), every piece within the waits.
        let (weight, flags, pieces, ip) = at_line(12);
        assert_eq!((weight, flags, ip), (600_000_000, both, 0), "exact, no ip");
        assert_eq!(pieces, 20);
        for s in events
            .samples
            .iter()
            .filter(|s| s.frames.first() == Some(&(3, 12)))
        {
            assert!(
                (700_000_000..=1_001_000_000).contains(&s.t_ns),
                "{}",
                s.t_ns
            );
        }
        let (weight, flags, pieces, ip) = at_line(50);
        assert_eq!((weight, flags, ip), (3_000_000_000, both, 0), "clamped");
        assert_eq!(pieces, 90, "3 s in 33.5 ms windows");
        // Blocked 4 s, 3.6 s timed: the 0.9 s of looks are scaled down to 0.4 s.
        assert_eq!(at_line(60).0, 400_000_000);
        let cpu = events.samples.iter().find(|s| s.ip == 0x10).unwrap();
        assert_eq!(cpu.flags & sample_flags::WAITING, 0);
    }

    #[test]
    fn looks_are_scaled_by_the_timed_waits_after_the_first_look_only() {
        let mut d = Decoded::default();
        let both = sample_flags::WAITED | sample_flags::WAITING;
        // A 100 ms timed wait before the collector first looked at the thread, then 300 ms of
        // looks for 200 ms blocked: the looks get all 200 ms.
        d.push_timed_wait(CpuSample {
            t_ns: 1_000_000_000,
            tid: 8,
            weight_ns: 100_000_000,
            flags: both,
            frames: vec![(3, 70)],
            ..CpuSample::default()
        });
        d.push_waiting(CpuSample {
            t_ns: 2_000_000_000,
            tid: 8,
            weight_ns: 300_000_000,
            flags: sample_flags::WAITING,
            frames: vec![(3, 80)],
            ..CpuSample::default()
        });
        d.clocks.insert(
            8,
            super::super::waits::ThreadClocks {
                first_ns: 1_500_000_000,
                blocked_ns: 200_000_000,
                ..Default::default()
            },
        );
        let events = d.take_events();
        let look: u64 = events
            .samples
            .iter()
            .filter(|s| s.flags & sample_flags::WAITED == 0)
            .map(|s| s.weight_ns)
            .sum();
        assert_eq!(look, 200_000_000);
    }

    #[test]
    fn an_absurd_timed_wait_is_spread_into_a_bounded_number_of_pieces() {
        let mut d = Decoded::default();
        let frames: Vec<(u32, i32)> = (0..MAX_FRAMES as u32).map(|i| (i, 0)).collect();
        d.push_timed_wait(CpuSample {
            t_ns: MAX_WAIT_NS,
            weight_ns: MAX_WAIT_NS,
            flags: sample_flags::WAITED | sample_flags::WAITING,
            frames,
            ..CpuSample::default()
        });
        let held: usize = d.samples.iter().map(|s| s.frames.len()).sum();
        assert!(held <= 2 * MAX_SPREAD_FRAMES, "{} pieces", d.samples.len());
        let weight: u64 = d.samples.iter().map(|s| s.weight_ns).sum();
        assert_eq!(weight, MAX_WAIT_NS, "nothing lost");
    }

    #[test]
    fn huge_frame_counts_are_dropped_not_allocated() {
        let mut d = Decoder::default();
        let mut s = record(Kind::Sample);
        s.c = 0xffff_ffff; // 2^32 - 1 frames: 32 GiB if trusted
        d.feed(&s, 0);
        let mut a = record(Kind::Alloc);
        a.d = 1 << 32 | 0xffff_ffff;
        d.feed(&a, 0);
        let mut c = record(Kind::Copy);
        c.c = u64::MAX;
        d.feed(&c, 0);
        // The frames that follow have no event to belong to.
        d.feed(&record(Kind::Frames), 0);
        d.finish_pending();
        assert!(d.out.samples.is_empty() && d.out.allocs.is_empty() && d.out.copies.is_empty());
        assert_eq!(d.out.malformed, 4);
        // The deepest stack the format allows still decodes.
        let mut s = record(Kind::Sample);
        s.c = MAX_FRAMES as u64;
        d.feed(&s, 0);
        for _ in 0..MAX_FRAMES.div_ceil(FRAMES_PER_RECORD) {
            d.feed(&record(Kind::Frames), 0);
        }
        assert_eq!(d.out.samples.len(), 1);
        assert_eq!(d.out.samples[0].frames.len(), MAX_FRAMES);
    }

    #[test]
    fn huge_code_lengths_are_dropped_not_allocated() {
        let mut d = Decoder::default();
        for (c, len_d) in [
            (0, u64::MAX),
            (u64::MAX, 0),
            (1 << 32, 1 << 40),
            (MAX_BLOB_BYTES as u64 + 1, 0),
        ] {
            let mut code = record(Kind::Code);
            code.a = 1;
            code.c = c;
            code.d = len_d;
            d.feed(&code, 0);
            d.feed(&record(Kind::Data), 0);
        }
        d.finish_pending();
        assert!(d.out.codes.is_empty());
        assert_eq!(d.out.malformed, 8, "each head and its data record");
        // The longest blobs the format allows still decode.
        let mut code = record(Kind::Code);
        code.a = 2;
        code.b = 1 << 32 | 1 << 40;
        code.c = MAX_BLOB_BYTES as u64 | (MAX_BLOB_BYTES as u64) << 32;
        code.d = MAX_BLOB_BYTES as u64;
        d.feed(&code, 0);
        for _ in 0..(3 * MAX_BLOB_BYTES).div_ceil(DATA_BYTES) {
            d.feed(&record(Kind::Data), 0);
        }
        let info = &d.out.codes[&2];
        assert_eq!(info.filename.len(), MAX_BLOB_BYTES);
        assert_eq!(info.linetable.len(), MAX_BLOB_BYTES);
        assert_eq!(d.out.malformed, 8);
    }

    /// The decoder's allocations so far as (address, free time), shared part first.
    fn allocs(events: &Events) -> Vec<(u64, Option<u64>)> {
        events.allocs.iter().map(|a| (a.addr, a.freed_ns)).collect()
    }

    #[test]
    fn shared_events_are_not_copied_and_frees_reach_them() {
        let mut d = Decoder::default();
        let alloc = |d: &mut Decoder, addr: u64, ts: u64| {
            let a = mlprof_wire::Alloc {
                addr,
                size: 64,
                weight: 1000,
                ..Default::default()
            };
            d.feed(&Record::alloc(7, ts, a), 0);
        };
        let free = |d: &mut Decoder, addr: u64, ts: u64| d.feed(&Record::free(7, ts, addr), 0);
        alloc(&mut d, 1, 1);
        alloc(&mut d, 2, 2);
        d.finish_pending();
        let first = d.out.share();
        assert_eq!(allocs(&first), [(1, None), (2, None)]);
        assert!(d.out.allocs.is_empty());
        // While the snapshot holds its share: a free of a shared block, a new block, and a
        // new block at a shared block's address (its free was not seen).
        free(&mut d, 1, 5);
        alloc(&mut d, 3, 6);
        alloc(&mut d, 2, 7);
        d.finish_pending();
        assert_eq!(
            allocs(&first),
            [(1, None), (2, None)],
            "a share never changes"
        );
        let second = d.out.share();
        assert!(
            !Arc::ptr_eq(&first, &second),
            "copied: the first share was still held"
        );
        let expected = [(1, Some(5)), (2, Some(7)), (3, None), (2, None)];
        assert_eq!(allocs(&second), expected);
        let at = Arc::as_ptr(&second);
        drop((first, second));
        free(&mut d, 3, 9);
        let s = mlprof_wire::Sample {
            weight_ns: 1,
            ..Default::default()
        };
        d.feed(&Record::sample(7, 10, s), 0);
        d.finish_pending();
        let third = d.out.share();
        assert_eq!(
            Arc::as_ptr(&third),
            at,
            "added to in place: no share was held"
        );
        assert_eq!(third.samples.len(), 1);
        drop(third);
        free(&mut d, 2, 11);
        let all = d.out.take_events();
        let expected = [(1, Some(5)), (2, Some(7)), (3, Some(9)), (2, Some(11))];
        assert_eq!(allocs(&all), expected);
        assert_eq!(all.samples.len(), 1);
    }

    #[test]
    fn wide_strings_decode() {
        assert_eq!(decode_str(&[0xe9, 0], 2), "é");
        assert_eq!(decode_str(&0x1F600u32.to_le_bytes(), 4), "😀");
        assert_eq!(decode_str(&[0xe9], 1), "é");
    }
}
