//! The event store of one channel: what [`super::decode`] made of its records, and what the
//! collector's own looks add (`collect::waits`). It keeps them bounded on long runs (waiting
//! samples merged per window, old events compacted, unmapped mappings pruned), shares them with
//! snapshots without copying ([`Decoded::share`]), and hands them over at the end with each
//! thread's looked-at waiting scaled to the time the kernel says it was blocked
//! ([`Decoded::take_events`]). It reads no records: the decoder fills it, never the reverse.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use mlprof_wire::sample_flags;

use crate::recording::{AllocGroup, AllocSample, CodeInfo, CopySample, CpuSample, RegionSpan};

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
/// Most regions of interpreter JIT code kept per process (CPython maps one per trace; a long
/// run compiles a few thousand). Past it, new ones are not kept, and their time is native.
pub const MAX_INTERPRETER_CODE: usize = 1 << 16;

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
    /// Code the interpreter's JIT made (few: copied into each snapshot; at most
    /// [`MAX_INTERPRETER_CODE`]).
    pub interpreter_code: Vec<crate::recording::InterpreterCode>,
    /// Times a thread blocked SIGPROF, in arrival order.
    pub sigprof_blocks: Vec<SigprofBlock>,
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
    /// Its CUDA calls (few: copied into each snapshot).
    pub gpu: super::gpu_calls::GpuStore,
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

/// A thread blocked SIGPROF (`sigprocmask`, `pthread_sigmask`, or started with it blocked).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SigprofBlock {
    /// The thread.
    pub tid: u32,
    /// From when (ns from launch).
    pub from_ns: u64,
    /// Until it unblocked it (`None`: it never did).
    pub until_ns: Option<u64>,
    /// The CPU it used meanwhile, as it said when it unblocked it (its own clock: a thread
    /// that blocked it around a wait, CPython's `subprocess` around its `vfork`, used none);
    /// while open, as the collector last read it (`cpu_at_block_ns`).
    pub cpu_ns: u64,
    /// An open span: the thread's CPU clock when the collector first looked (none: not read).
    pub cpu_at_block_ns: Option<u64>,
}

/// Most SIGPROF-blocking spans kept per channel ([`Decoded::sigprof_mask`]).
const MAX_SIGPROF_BLOCKS: usize = 4096;

/// Events held before the first compaction: short runs are never compacted.
pub(super) const COMPACT_FROM: usize = 100_000;

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
    /// `bytes` at `start` were made executable by the interpreter's JIT (`made`) or unmapped,
    /// at `t_ns`. Untrusted: a region of more than 1 GiB, or past the address space, is not
    /// believed.
    pub fn interpreter_code(&mut self, start: u64, bytes: u64, made: bool, t_ns: u64) {
        let Some(end) = start.checked_add(bytes).filter(|_| bytes <= 1 << 30) else {
            self.malformed += 1;
            return;
        };
        if made {
            if self.interpreter_code.len() < MAX_INTERPRETER_CODE {
                self.interpreter_code
                    .push(crate::recording::InterpreterCode {
                        start,
                        end,
                        from_ns: t_ns,
                        until_ns: None,
                    });
            }
        } else if let Some(c) = self
            .interpreter_code
            .iter_mut()
            .rev()
            .find(|c| c.start == start && c.until_ns.is_none())
        {
            c.until_ns = Some(t_ns);
        }
    }

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

    /// Timed waits still going on: they lasted at least until `end_ns` (their process's end).
    pub fn open_waits_went_on_until(&mut self, end_ns: u64) {
        for wait in self.open_waits.values_mut() {
            wait.seen_ns = wait.seen_ns.max(end_ns);
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
    pub(super) fn held(&self) -> usize {
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

    /// A sampled allocation. A new block at a live sampled address means that the free of the
    /// block before it was not seen (dropped): that one is freed now.
    pub(super) fn alloc(&mut self, alloc: AllocSample) {
        let index = self.shared.allocs.len() + self.allocs.len();
        if let Some(old) = self.live.insert(alloc.addr, index) {
            self.freed(old, alloc.t_ns);
        }
        self.allocs.push(alloc);
    }

    /// A sampled block or mapping freed at `t_ns` (anything else at `addr` was not sampled).
    pub(super) fn free(&mut self, addr: u64, t_ns: u64) {
        if let Some(i) = self.live.remove(&addr) {
            self.freed(i, t_ns);
        } else if let Some(i) = self.live_mapped.remove(&addr) {
            if let Some(m) = self.mappings.get_mut(i) {
                m.freed_ns.get_or_insert(t_ns);
            }
        }
    }

    /// A region ended asking for a report at `level` ([`Decoded::take_report_requests`]).
    pub(super) fn request_report(&mut self, id: u64, level: u8) {
        self.report_requests.push((id, level));
    }

    /// A thread blocked or unblocked SIGPROF. At most [`MAX_SIGPROF_BLOCKS`] are kept (a
    /// program that blocks it around every call sends one pair each time; the first ones say
    /// what the report needs).
    pub(super) fn sigprof_mask(&mut self, tid: u32, blocked: bool, t_ns: u64, cpu_ns: u64) {
        let blocks = &mut self.sigprof_blocks;
        let open = blocks
            .iter()
            .rposition(|b| b.tid == tid && b.until_ns.is_none());
        match (blocked, open) {
            (true, None) if blocks.len() < MAX_SIGPROF_BLOCKS => blocks.push(SigprofBlock {
                tid,
                from_ns: t_ns,
                until_ns: None,
                cpu_ns: 0,
                cpu_at_block_ns: None,
            }),
            (false, Some(i)) => {
                let b = &mut blocks[i];
                b.until_ns = Some(t_ns.max(b.from_ns));
                b.cpu_ns = cpu_ns.min(b.until_ns.unwrap_or(t_ns) - b.from_ns);
            }
            _ => {}
        }
    }

    /// A sampled anonymous mapping.
    pub(super) fn mapped(&mut self, mapping: AllocSample) {
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

    /// What is left (`size` bytes at `addr`) of the sampled mapping at `from`, cut at `t_ns`:
    /// a mapping of its own from then, at the cut one's line and time, with its share of the
    /// cut one's weight. Nothing if that one is not known (not sampled, or its record lost).
    pub(super) fn cut_mapping(&mut self, from: u64, addr: u64, size: u64, t_ns: u64) {
        let Some(cut) = self
            .live_mapped
            .get(&from)
            .and_then(|&i| self.mappings.get(i))
        else {
            return;
        };
        if cut.size == 0 || size > cut.size {
            return;
        }
        let part = AllocSample {
            addr,
            size,
            weight: (cut.weight as u128 * size as u128 / cut.size as u128) as u64,
            freed_ns: None,
            cut_ns: Some(t_ns.max(cut.cut_ns.unwrap_or(cut.t_ns))),
            ..cut.clone()
        };
        if addr == from {
            self.free(from, t_ns); // the part replaces it at its start
        }
        self.mapped(part);
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

    /// Note that allocation `i` (counted from the first) was freed at `t_ns`, unless it
    /// already was.
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

#[cfg(test)]
mod tests;
