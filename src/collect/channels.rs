//! The channel files of a run: found by scanning the session directory, drained while the
//! target runs and once more after it ends (SIGKILL included: the files outlive the process).
//!
//! Everything in a channel is untrusted: the profiled program can write anything into its own
//! channel file or into the session directory. A file that is not a usable channel is skipped
//! with a warning; a channel whose header or ring positions become inconsistent, or whose file
//! shrinks, is no longer read (what was read is kept) and the report says what was lost. The
//! work per drain is bounded by the ring's size, so a hostile writer cannot keep the collector
//! busy.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mlprof_wire::{python_status, state, WireError, FILE_SUFFIX};

use super::decode::{Decoder, MAX_RECORD_BYTES};
use super::events::{Events, SigprofBlock};
use super::mapping::{Mapping, OpenError};
use super::pace::Pace;
use super::procfs;
use super::waits;
use crate::recording::maps::{self, MappedFile};
use crate::recording::{ChannelSummary, MappedMemory};

struct Channel {
    mapping: Mapping,
    summary: ChannelSummary,
    decoder: Decoder,
    /// The file name, for warnings.
    name: String,
    /// Ring slots when the channel was attached (a header that changes it is corrupt).
    slots: u64,
    /// Why the channel is no longer read, once it is not.
    stopped: Option<String>,
    /// The header's `region_requests` when last looked at.
    region_requests: u32,
    /// When the CPU clocks of its threads that block SIGPROF were last read (ns from launch).
    blocks_read_ns: u64,
    /// Its map of files: when it may be read again (ns from launch), and whether a sample
    /// fell outside it since it was read (a library loaded since).
    maps_due_ns: u64,
    maps_stale: bool,
    /// How long after its last look its next look at waiting threads comes (ns): 0 while its
    /// looks find a Python thread running or in a wait it does not time, growing to
    /// `waits::MAX_LOOK_GAP_NS` while they find every one in a timed wait seen already.
    look_gap_ns: u64,
    /// When its file's size was last looked at (`Mapping::damage`; ns from launch).
    stat_ns: u64,
}

/// Files skipped with a warning of their own; more are only counted.
const MAX_SKIP_WARNINGS: usize = 10;

/// Every channel of the run, keyed by file name (`<pid>.<start_ns>.ring`: unique per image).
pub struct Channels {
    dir: PathBuf,
    open: BTreeMap<PathBuf, Channel>,
    launch_ns: u64,
    /// Pids of channel files still being set up at the last scan.
    pending: Vec<u32>,
    /// `*.ring` files that are not usable channels: never looked at again.
    skipped: BTreeSet<PathBuf>,
    /// `*.ring` files not initialised at the last scan (empty, short, magic still zero), with
    /// why: retried at every scan, and a warning at the end if still so.
    unready: BTreeMap<PathBuf, String>,
    /// Things to tell the user (skipped files, channels no longer read).
    warnings: Vec<String>,
    /// The budget of looks at waiting threads ([`WAITS_SHARE`] of one CPU).
    waits: Pace,
    /// Whether the directory may have new entries since the last scan.
    dir_change: super::dir_change::DirChange,
}

/// Share of one CPU that looks at waiting threads may take: with many processes or threads
/// (a look reads two files per thread), each process is looked at less often than every
/// tick, and its samples weigh the time since its last look.
pub const WAITS_SHARE: f64 = 0.0015;

/// What one live process adds to the tree's footprint now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LiveHeap {
    /// Heap bytes (a fork child's beyond what it inherited).
    pub heap: i64,
    /// Bytes of anonymous mappings it made itself.
    pub mapped: u64,
    /// A fork image (not exec'd).
    pub forked: bool,
    /// When its channel was made (ns from launch).
    pub start_ns: u64,
    /// A fork child: just before its fork (ns from launch; 0 if unknown).
    pub fork_ns: u64,
    /// Its parent's pid.
    pub ppid: u32,
}

impl Channels {
    /// Channels of the session directory `dir`; times are made relative to `launch_ns`.
    pub fn new(dir: &Path, launch_ns: u64) -> Channels {
        Channels {
            dir: dir.to_path_buf(),
            open: BTreeMap::new(),
            launch_ns,
            pending: Vec::new(),
            skipped: BTreeSet::new(),
            unready: BTreeMap::new(),
            warnings: Vec::new(),
            waits: Pace::new(WAITS_SHARE, 10_000_000, 0),
            dir_change: Default::default(),
        }
    }

    /// CPU spent looking at waiting threads so far (ns).
    pub fn waits_spent_ns(&self) -> u64 {
        self.waits.spent_ns()
    }

    /// Attach channel files that appeared since the last scan. Files still being initialised
    /// are retried next time; files that are not usable channels (not regular files, another
    /// wire version, a corrupt header) are skipped with a warning. Never fails the run.
    pub fn scan(&mut self) {
        // Files still being set up change without the directory changing: looked at again.
        let waiting = !self.pending.is_empty() || !self.unready.is_empty();
        if !self.dir_change.due(&self.dir) && !waiting {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        self.pending.clear();
        for entry in entries.flatten() {
            let path = entry.path();
            let is_channel = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(FILE_SUFFIX));
            if !is_channel || self.open.contains_key(&path) || self.skipped.contains(&path) {
                continue;
            }
            let mapping = match Mapping::open(&path) {
                Ok(mapping) => mapping,
                Err(OpenError::Unready(why)) => {
                    self.unready_file(path, why);
                    continue;
                }
                Err(OpenError::Refused(why)) => {
                    self.skip(path, &why);
                    continue;
                }
            };
            let (mut summary, slots) = match mapping.ring() {
                Ok(ring) => (
                    ChannelSummary::from_header(ring.header(), self.launch_ns),
                    ring.capacity(),
                ),
                Err(WireError::NotReady) => {
                    self.unready_file(path, "not initialised");
                    continue;
                }
                Err(err) => {
                    self.skip(path, &err.to_string());
                    continue;
                }
            };
            self.unready.remove(&path);
            // A process that started a child most likely waits for it now: its next look
            // comes at once, whatever gap its looks had grown to (the child's work joins the
            // line its parent waits on, `model::pooljoin`).
            for parent in self.open.values_mut() {
                if parent.summary.pid == summary.ppid {
                    parent.look_gap_ns = 0;
                }
            }
            summary.inherited_heap = summary.inherited_heap.min(MAX_RECORD_BYTES);
            summary.maps = procfs::read_maps(summary.pid).unwrap_or_default();
            let name = file_name(&path);
            self.open.insert(
                path,
                Channel {
                    mapping,
                    summary,
                    decoder: Decoder::default(),
                    name,
                    slots,
                    stopped: None,
                    region_requests: 0,
                    blocks_read_ns: 0,
                    maps_due_ns: 0,
                    maps_stale: false,
                    look_gap_ns: 0,
                    stat_ns: 0,
                },
            );
        }
    }

    /// A file that may still be being created: retried at the next scan.
    fn unready_file(&mut self, path: PathBuf, why: &str) {
        // `<pid>.<start_ns>.ring`: a process that is attaching right now.
        let pid = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('.').next())
            .and_then(|p| p.parse::<u32>().ok());
        self.pending.extend(pid);
        self.unready.insert(path, why.to_string());
    }

    /// A file that is not a usable channel: never looked at again, with a warning.
    fn skip(&mut self, path: PathBuf, why: &str) {
        self.unready.remove(&path);
        if self.skipped.len() < MAX_SKIP_WARNINGS {
            self.warnings.push(format!(
                "skipped {} in the session directory ({why}): not a channel this mlprof can \
                 read, so nothing from it is in the report",
                file_name(&path)
            ));
        }
        self.skipped.insert(path);
    }

    /// Read every published record and refresh the counters of every channel. `now_ns` is
    /// relative to launch. Reads at most one ring's worth of records per channel.
    pub fn drain(&mut self, now_ns: u64) {
        for channel in self.open.values_mut() {
            if channel.settled() {
                continue; // read again at the end (`finish`)
            }
            let mut budget = channel.slots;
            channel.drain(now_ns, self.launch_ns, &mut budget, &mut self.warnings);
        }
    }

    /// Whether a process has ended a region asking for a report since the last look (a read of
    /// each header; no system call).
    pub fn region_requests_waiting(&mut self) -> bool {
        let mut waiting = false;
        for channel in self.open.values_mut() {
            if channel.stopped.is_some() {
                continue;
            }
            if let Ok(ring) = channel.mapping.ring() {
                let now = ring.header().region_requests.load(Ordering::Acquire);
                if now != channel.region_requests {
                    channel.region_requests = now;
                    waiting = true;
                }
            }
        }
        waiting
    }

    /// Regions that ended asking for a report since the last call: (pid, channel start in ns
    /// from launch, region id).
    pub fn take_report_requests(&mut self) -> Vec<super::RegionRequest> {
        let mut out = Vec::new();
        for channel in self.open.values_mut() {
            for (id, level) in channel.decoder.out.take_report_requests() {
                out.push(super::RegionRequest {
                    pid: channel.summary.pid,
                    start_ns: channel.summary.start_ns,
                    id,
                    page: level >= mlprof_wire::region_report::PAGE,
                });
            }
        }
        out
    }

    /// Off-CPU samples of every live Python process (see `waits`), within their budget: the
    /// process looked at longest ago first.
    pub fn sample_waits(&mut self, now_ns: u64) {
        let newest = self.newest_live();
        let mut due: Vec<(u64, &PathBuf)> = newest
            .iter()
            .filter_map(|path| {
                let channel = self.open.get(path)?;
                let s = &channel.summary;
                let walked = s.py_runtime != 0 && python_status::walked(s.python_status);
                let gap_over = now_ns >= s.last_wait_ns.saturating_add(channel.look_gap_ns);
                (walked && gap_over).then_some((s.last_wait_ns, path))
            })
            .collect();
        due.sort_unstable();
        for (_, path) in due {
            if !self.waits.allowed(now_ns) {
                return; // the others wait for the next tick, their weight growing
            }
            let Some(channel) = self.open.get_mut(path) else {
                continue;
            };
            let s = &mut channel.summary;
            let weight = if s.last_wait_ns == 0 {
                TICK_NS
            } else {
                now_ns.saturating_sub(s.last_wait_ns)
            };
            s.last_wait_ns = now_ns;
            let target = waits::Target {
                pid: s.pid,
                python: s.python.as_deref().unwrap_or(""),
                runtime: s.py_runtime as usize,
                code_type: s.py_code_type as usize,
                launch_ns: self.launch_ns,
            };
            let out = &mut channel.decoder.out;
            let found = self
                .waits
                .spend(|| waits::sample(&target, weight, now_ns, out));
            channel.look_gap_ns = waits::next_look_gap(channel.look_gap_ns, found);
            channel.compact_if_due();
        }
    }

    /// The newest channel of each pid that has not exited.
    fn newest_live(&self) -> Vec<PathBuf> {
        let mut newest: HashMap<u32, (u64, &PathBuf, bool)> = HashMap::new();
        for (path, channel) in &self.open {
            let s = &channel.summary;
            let live = s.exit_code.is_none();
            let slot = newest.entry(s.pid).or_insert((s.start_ns, path, live));
            if s.start_ns >= slot.0 {
                *slot = (s.start_ns, path, live);
            }
        }
        let mut paths: Vec<PathBuf> = newest
            .into_values()
            .filter(|(_, _, live)| *live)
            .map(|(_, p, _)| p.clone())
            .collect();
        paths.sort_unstable();
        paths
    }

    /// Pids of processes other than `child` whose newest image has not recorded an exit and
    /// that are still alive (not gone, not a zombie): descendants that outlived the command.
    pub fn running_descendants(&self, child: u32) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .newest_live()
            .iter()
            .map(|path| self.open[path].summary.pid)
            .chain(self.pending.iter().copied())
            .filter(|&pid| pid != child && super::procfs::alive(pid))
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// What each live process (the newest image of each pid that has not exited) adds to the
    /// tree's heap now: its heap, less what a fork child inherited, and its anonymous
    /// mappings (a fork child's are its own). Summed per tick.
    pub fn live_heaps(&self) -> BTreeMap<u32, LiveHeap> {
        let mut newest: BTreeMap<u32, (u64, LiveHeap)> = BTreeMap::new();
        for channel in self.open.values() {
            let s = &channel.summary;
            let exited = s.exit_code.is_some();
            let heap = if exited {
                0
            } else if s.forked {
                // What a fork child adds to the tree: its heap beyond what it inherited (the
                // inherited blocks are its parent's, counted there).
                s.heap_current
                    .saturating_sub(i64::try_from(s.inherited_heap).unwrap_or(i64::MAX))
            } else {
                s.heap_current
            };
            let live = LiveHeap {
                heap,
                mapped: if exited { 0 } else { s.mapped.current },
                forked: s.forked,
                start_ns: s.start_ns,
                fork_ns: s.fork_ns,
                ppid: s.ppid,
            };
            let slot = newest.entry(s.pid).or_insert((s.start_ns, live));
            if s.start_ns >= slot.0 {
                *slot = (s.start_ns, live);
            }
        }
        newest
            .into_iter()
            .map(|(pid, (_, heap))| (pid, heap))
            .collect()
    }

    /// After the run: drain what is left, skipping slots that a killed writer never published,
    /// and return every channel's summary and the warnings about files and channels.
    pub fn finish(mut self, now_ns: u64) -> (Vec<ChannelSummary>, Vec<String>) {
        self.scan();
        let mut out = Vec::new();
        let warnings = &mut self.warnings;
        for channel in self.open.values_mut() {
            // At most two rings' worth of records and holes, whatever the writer does.
            let mut budget = channel.slots.saturating_mul(2);
            channel.drain(now_ns, self.launch_ns, &mut budget, warnings);
            while budget > 0
                && channel.stopped.is_none()
                && channel.mapping.ring().is_ok_and(|ring| ring.skip_hole())
            {
                budget -= 1;
                channel.drain(now_ns, self.launch_ns, &mut budget, warnings);
            }
            channel.decoder.finish_pending();
            if channel.stopped.is_none() {
                if let Ok(ring) = channel.mapping.ring() {
                    // Nobody reads this channel any more: a process that goes on stops sampling.
                    ring.header().collector_gone.store(1, Ordering::Relaxed);
                }
            }
            warnings.extend(channel.malformed_warning());
            warnings.extend(channel.sigprof_warning());
            let mut decoded = std::mem::take(&mut channel.decoder.out);
            // A timed wait still open at the end went on until its process ended (it sends
            // its own sample when it returns), not only until the last look at it: looks are
            // paced, so that one may be long before.
            let end_ns = channel.summary.exit_ns.unwrap_or(now_ns);
            decoded.open_waits_went_on_until(end_ns);
            let events = decoded.take_events();
            out.push(ChannelSummary {
                samples: events.samples,
                allocs: events.allocs,
                alloc_groups: events.alloc_groups,
                copies: events.copies,
                window_ns: events.window_ns,
                merged_cpu_samples: events.merged_cpu_samples,
                peak_marks: events.peak_marks,
                gpu_calls: decoded.gpu.take(),
                interpreter_code: decoded.interpreter_code,
                codes: decoded.codes,
                threads: decoded.threads,
                queued: queued_of(&decoded.queued),
                regions: decoded.regions,
                mapped: MappedMemory {
                    marks: decoded.mapped_marks,
                    mappings: decoded.mappings,
                    ..channel.summary.mapped.counters()
                },
                ..channel.summary.clone()
            });
        }
        out.sort_by_key(|s| s.start_ns);
        for (path, why) in std::mem::take(&mut self.unready) {
            self.skip(path, why.as_str());
        }
        let skipped = self.skipped.len();
        if skipped > MAX_SKIP_WARNINGS {
            self.warnings.push(format!(
                "{} more files named *{FILE_SUFFIX} in the session directory were skipped",
                skipped - MAX_SKIP_WARNINGS
            ));
        }
        (out, self.warnings)
    }
}

impl Channels {
    /// What has been drained so far, for a snapshot of the run in progress, without draining
    /// or ending anything: every channel's summary (code objects and threads copied, the
    /// newest image of each process that has not exited marked `still_running`) with its
    /// sampled events shared, not copied ([`super::events::Decoded::share`]), and the
    /// warnings so far.
    pub fn snapshot(&mut self) -> (Vec<(ChannelSummary, Arc<Events>)>, Vec<String>) {
        let live = self.newest_live();
        let mut warnings = self.warnings.clone();
        let mut out: Vec<(ChannelSummary, Arc<Events>)> = self
            .open
            .iter_mut()
            .map(|(path, channel)| {
                warnings.extend(channel.malformed_warning());
                warnings.extend(channel.sigprof_warning());
                let d = &mut channel.decoder.out;
                let summary = ChannelSummary {
                    codes: d.codes.clone(),
                    threads: d.threads.clone(),
                    queued: queued_of(&d.queued),
                    regions: d.regions.clone(),
                    mapped: MappedMemory {
                        marks: d.mapped_marks.clone(),
                        mappings: d.mappings.clone(),
                        ..channel.summary.mapped.counters()
                    },
                    gpu_calls: d.gpu.calls().clone(),
                    interpreter_code: d.interpreter_code.clone(),
                    still_running: live.contains(path),
                    ..channel.summary.clone()
                };
                (summary, d.share())
            })
            .collect();
        out.sort_by_key(|(s, _)| s.start_ns);
        (out, warnings)
    }
}

/// A thread blocking SIGPROF for less than this loses nothing worth a warning (its signal waits
/// a moment and the sample then covers the time).
const MIN_SIGPROF_BLOCK_NS: u64 = 100_000_000;
/// A span it ended that used less CPU than this misplaced too little to warn of, however long
/// it lasted (CPython's `subprocess` blocks every signal while its `vfork` child starts, which
/// on a loaded machine can take a tenth of a second of waiting).
const MIN_SIGPROF_CPU_NS: u64 = 50_000_000;

/// The spans worth a warning: those still open at `end_ns` that lasted
/// [`MIN_SIGPROF_BLOCK_NS`] (what the thread used since is unknown), and those ended that
/// used [`MIN_SIGPROF_CPU_NS`] of CPU.
fn unsampled(blocks: &[SigprofBlock], end_ns: u64) -> Vec<&SigprofBlock> {
    blocks
        .iter()
        .filter(|b| match (b.until_ns, b.cpu_at_block_ns) {
            (Some(_), _) | (None, Some(_)) => b.cpu_ns >= MIN_SIGPROF_CPU_NS,
            // Never read (its thread gone before the first look): by its length.
            (None, None) => end_ns.saturating_sub(b.from_ns) >= MIN_SIGPROF_BLOCK_NS,
        })
        .collect()
}

/// How often a channel file's size is looked at for a truncation (ns): a `stat` of each
/// channel at every tick was a tenth of an idle run's collector CPU. A truncation the `stat`
/// has not seen yet is seen by the first read of a page cut off (it faults, `sigbus`).
const STAT_EVERY_NS: u64 = 100_000_000;

/// The longest a map of files that a sample fell outside waits to be read again (ns): the
/// names of a library loaded by a process that ends within it are lost.
const MAPS_MAX_WAIT_NS: u64 = 100_000_000;

/// How often the CPU clocks of threads that block SIGPROF are read (ns): a read per thread
/// each tick cost a fifth of the collector's time on a DataLoader with eight workers (one such
/// thread each); a thread that ends within this of its last reading may use that much CPU
/// unseen, which is what the warning's threshold allows for.
const BLOCKS_READ_EVERY_NS: u64 = 100_000_000;

/// Spans still open (a thread that has not unblocked SIGPROF): the CPU its thread used since,
/// by the kernel's clock of the thread (`cpu_of`: `/proc/PID/task/TID/schedstat`), read when it
/// is first seen and then every [`BLOCKS_READ_EVERY_NS`] while the process lives; the first
/// reading is the baseline. A helper thread that
/// blocks every signal by design and waits (PyTorch's `resource_sharer`, jemalloc's background
/// threads) then uses none, and is not said to have lost CPU. A thread gone keeps its last.
fn watch_open_blocks(blocks: &mut [SigprofBlock], mut cpu_of: impl FnMut(u32) -> Option<u64>) {
    for b in blocks.iter_mut().filter(|b| b.until_ns.is_none()) {
        let Some(now) = cpu_of(b.tid) else { continue };
        match b.cpu_at_block_ns {
            None => b.cpu_at_block_ns = Some(now),
            Some(base) => b.cpu_ns = now.saturating_sub(base),
        }
    }
}

/// The last component of `path`, for messages.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The collector tick in nanoseconds (weight of the first off-CPU look at a process).
pub(super) const TICK_NS: u64 = super::TICK.as_nanos() as u64;

/// Whether `ip` falls in an executable mapping of `maps`.
fn covers(maps: &[MappedFile], ip: u64) -> bool {
    maps::find_mapping(maps, ip).is_some_and(|m| m.executable)
}

impl Channel {
    /// Merge old events if enough have arrived ([`super::compact`]); interpreter instruction
    /// pointers stand for their mapping.
    fn compact_if_due(&mut self) {
        let maps = &self.summary.maps;
        let mut seen: HashMap<u64, u64> = HashMap::new();
        let mut canon = |ip: u64| {
            *seen.entry(ip).or_insert_with(|| {
                maps::find_mapping(maps, ip)
                    .filter(|m| m.executable)
                    .filter(|m| maps::code_class(&m.path) == maps::CodeClass::Interpreter)
                    .map_or(ip, |m| m.start)
            })
        };
        self.decoder.out.compact_if_due(&mut canon);
    }

    /// The warning about threads that blocked SIGPROF long enough to matter, if any did: their
    /// timer signals waited, so their CPU time went unsampled (until they unblocked it, when
    /// it all went to one sample).
    fn sigprof_warning(&self) -> Option<String> {
        let d = &self.decoder.out;
        let end = self.summary.exit_ns.unwrap_or(d.newest_ns);
        let long = unsampled(&d.sigprof_blocks, end);
        if long.is_empty() {
            return None;
        }
        let span =
            |b: &&SigprofBlock| match b.until_ns {
                Some(to) => format!(
                    "thread {} from {:.2} s to {:.2} s ({:.2} s of CPU, all on the line where it \
                 unblocked it)",
                    b.tid,
                    b.from_ns as f64 / 1e9,
                    to as f64 / 1e9,
                    b.cpu_ns as f64 / 1e9
                ),
                None => {
                    format!(
                "thread {} from {:.2} s to its end (the CPU time it used since, {}{:.2} s, is \
                 missing from its lines)",
                b.tid,
                b.from_ns as f64 / 1e9,
                if b.cpu_at_block_ns.is_some() { "at least " } else { "unknown, over " },
                if b.cpu_at_block_ns.is_some() {
                    b.cpu_ns as f64 / 1e9
                } else {
                    MIN_SIGPROF_BLOCK_NS as f64 / 1e9
                }
            )
                }
            };
        let shown: Vec<String> = long.iter().take(3).map(span).collect();
        let more = long.len() - shown.len();
        let command = self
            .summary
            .command
            .first()
            .map_or(self.name.as_str(), |c| c.rsplit('/').next().unwrap_or(c));
        Some(format!(
            "pid {} ({command}): the program blocked SIGPROF, mlprof's sampling signal, with \
             sigprocmask/pthread_sigmask: {}{}",
            self.summary.pid,
            shown.join("; "),
            if more > 0 {
                format!("; and {more} more time{}", if more == 1 { "" } else { "s" })
            } else {
                String::new()
            },
        ))
    }

    /// The warnings about records dropped so far: malformed ones, and regions lost to a full
    /// ring or left out beyond [`super::events::MAX_REGIONS`].
    fn malformed_warning(&self) -> Vec<String> {
        let mut out = Vec::new();
        let (pid, name) = (self.summary.pid, &self.name);
        let losses = &self.decoder.out.region_losses;
        let mut malformed = self.decoder.out.malformed;
        // Region records of no open region, from a channel whose ring was full: their begin was
        // dropped with the rest, which is not the writer's fault.
        if self.summary.dropped > 0 {
            let lost = losses.begins_lost(self.summary.forked);
            if lost > 0 {
                out.push(format!(
                    "pid {pid} ({name}): {lost} {}' records were dropped because the channel \
                     was full (the program marked regions faster than mlprof read them); those \
                     regions are missing from the report, and a region whose end alone was \
                     dropped shows as not ended",
                    if lost == 1 { "region" } else { "regions" },
                ));
            }
        } else {
            malformed += losses.orphan_records;
        }
        if losses.over_cap > 0 {
            out.push(format!(
                "pid {pid} ({name}): more than {} regions: the {} after the first {} are left \
                 out of the report",
                super::events::MAX_REGIONS,
                losses.over_cap,
                super::events::MAX_REGIONS,
            ));
        }
        if malformed > 0 {
            out.push(format!(
                "pid {pid} ({name}): {malformed} malformed record{} dropped (the channel was \
                 overwritten or its writer is buggy); the events they belonged to are missing \
                 from the report",
                if malformed == 1 { "" } else { "s" },
            ));
        }
        out
    }

    /// Stop reading this channel (it is corrupt or was truncated), with a warning saying what
    /// is lost.
    fn stop(&mut self, why: String, now_ns: u64, warnings: &mut Vec<String>) {
        // A file cut short explains a header or positions that read as zeros: said as such
        // (its size is looked at only every `STAT_EVERY_NS` otherwise).
        let why = self.mapping.damage().unwrap_or(why);
        warnings.push(format!(
            "pid {} ({}): {why}; stopped reading it {:.2} s into the run, so its later samples, \
             allocations and heap counters are missing from the report",
            self.summary.pid,
            self.name,
            now_ns as f64 / 1e9
        ));
        self.stopped = Some(why);
    }

    /// Whether its process image has ended and left nothing to read: not drained at ticks
    /// (a `stat` of its file each), only at the end. A header that no longer reads (the
    /// file truncated) is not settled: the drain says why it stops.
    fn settled(&self) -> bool {
        self.stopped.is_some()
            || (self.summary.exit_code.is_some()
                && self.mapping.ring().is_ok_and(|ring| ring.backlog() == 0))
    }

    /// Read up to `budget` records (decremented for each) and refresh the header's counters.
    fn drain(&mut self, now_ns: u64, launch_ns: u64, budget: &mut u64, warnings: &mut Vec<String>) {
        if self.stopped.is_some() {
            return;
        }
        // A truncation is seen by the `stat` of the file every `STAT_EVERY_NS`, and between
        // those by a read that faulted (no system call).
        let damage = if now_ns >= self.stat_ns.saturating_add(STAT_EVERY_NS) {
            self.stat_ns = now_ns;
            self.mapping.damage()
        } else {
            self.mapping.fault()
        };
        if let Some(why) = damage {
            self.stop(why, now_ns, warnings);
            return;
        }
        let ring = match self.mapping.ring() {
            Ok(ring) if ring.capacity() == self.slots => ring,
            Ok(ring) => {
                let why = format!(
                    "its header changed the ring size from {} to {} slots",
                    self.slots,
                    ring.capacity()
                );
                self.stop(why, now_ns, warnings);
                return;
            }
            Err(err) => {
                let why = format!("its header became invalid ({err})");
                self.stop(why, now_ns, warnings);
                return;
            }
        };
        let backlog = ring.backlog();
        if backlog > ring.capacity() {
            let why = format!(
                "its ring positions are corrupt ({backlog} records pending in a ring of {} \
                 slots)",
                ring.capacity()
            );
            self.stop(why, now_ns, warnings);
            return;
        }
        let s = &mut self.summary;
        let mut unmapped_ip = false;
        while *budget > 0 {
            let Some(record) = ring.pop() else { break };
            *budget -= 1;
            s.records += 1;
            if let Some(exit) = record.as_process_exit() {
                s.exit_code = Some(exit.code as i32);
                s.exit_ns = Some(record.ts_ns.saturating_sub(launch_ns).min(now_ns));
            } else if let Some(sample) = record.as_sample() {
                // A tail sample (the CPU since a thread's last sample) has no address.
                unmapped_ip |= sample.ip != 0 && !covers(&s.maps, sample.ip);
            }
            self.decoder.feed(&record, launch_ns);
        }
        if let Some(why) = self.mapping.fault() {
            // Truncated while we read: what came after the fault was zeros, not counters. (A
            // truncation after the reads is seen by the next drain's `stat`.)
            self.stop(why, now_ns, warnings);
            return;
        }
        let blocks = &self.decoder.out.sigprof_blocks;
        let unread = blocks
            .iter()
            .any(|b| b.until_ns.is_none() && b.cpu_at_block_ns.is_none());
        let due = now_ns.saturating_sub(self.blocks_read_ns) >= BLOCKS_READ_EVERY_NS;
        if self.summary.exit_code.is_none() && (unread || due) {
            self.blocks_read_ns = now_ns;
            let pid = self.summary.pid;
            watch_open_blocks(&mut self.decoder.out.sigprof_blocks, |tid| {
                procfs::thread_cpu_ns(pid, tid)
            });
        }
        let s = &mut self.summary;
        self.maps_stale |= unmapped_ip;
        if self.maps_stale && s.exit_code.is_none() && now_ns >= self.maps_due_ns {
            // A library loaded since the last look (dlopen): read the map again while the
            // process is alive. It may have ended meanwhile (its exit record not read yet): a
            // zombie's map is empty, and must not replace what was read before. A process
            // importing torch loads hundreds of libraries and has a map of thousands of
            // lines: read again at most after 40 times what the last reading cost.
            let before = super::pace::thread_cpu_ns();
            if let Ok(maps) = procfs::read_maps(s.pid) {
                s.maps = crate::recording::maps::merge_newer(&s.maps, maps);
            }
            let cost = super::pace::thread_cpu_ns().saturating_sub(before);
            self.maps_due_ns = now_ns + (40 * cost).min(MAPS_MAX_WAIT_NS);
            self.maps_stale = false;
        }
        let header = ring.header();
        if header.state.load(Ordering::Acquire) == state::EXITED && s.exit_code.is_none() {
            s.exit_code = Some(header.exit_code.load(Ordering::Relaxed));
            s.exit_ns = Some(
                header
                    .exit_ns
                    .load(Ordering::Relaxed)
                    .saturating_sub(launch_ns)
                    .min(now_ns),
            );
        }
        s.python_status = header.python_status.load(Ordering::Relaxed);
        s.python_heap = header.python_heap.load(Ordering::Relaxed);
        s.fork_depth = header
            .fork_depth
            .load(Ordering::Relaxed)
            .min(mlprof_wire::MAX_FRAMES as u32);
        s.py_runtime = header.py_runtime.load(Ordering::Relaxed);
        s.py_code_type = header.py_code_type.load(Ordering::Relaxed);
        s.sample_interval_ns = header.sample_interval_ns.load(Ordering::Relaxed) as u64;
        // The counters are written by the program: clamped to what a real process can reach,
        // so that sums over channels stay meaningful.
        let peak = signed(header.heap.peak.load(Ordering::Relaxed));
        if peak > s.heap_peak {
            s.heap_peak = peak;
            s.heap_peak_seen_ns = now_ns;
        }
        s.heap_current = signed(header.heap.current.load(Ordering::Relaxed));
        let mapped = &header.mapped;
        let clamped = |v: i64| (v.max(0) as u64).min(MAX_RECORD_BYTES);
        s.mapped.peak = clamped(mapped.peak.load(Ordering::Relaxed));
        s.mapped.current = clamped(mapped.current.load(Ordering::Relaxed));
        s.mapped.total = mapped.total.load(Ordering::Relaxed).min(MAX_RECORD_BYTES);
        s.mapped.count = mapped.count.load(Ordering::Relaxed);
        s.alloc_bytes = header
            .heap
            .total
            .load(Ordering::Relaxed)
            .min(MAX_RECORD_BYTES);
        s.alloc_count = header
            .heap
            .count
            .load(Ordering::Relaxed)
            .min(MAX_RECORD_BYTES);
        s.dropped = ring.dropped().min(MAX_RECORD_BYTES);
        self.compact_if_due();
    }
}

/// A byte count from a channel header, clamped to what a real process can reach.
fn signed(bytes: i64) -> i64 {
    let max = MAX_RECORD_BYTES as i64;
    bytes.clamp(-max, max)
}

/// Run-queue delay per slot and thread, as `ChannelSummary::queued` holds it.
fn queued_of(queued: &std::collections::BTreeMap<(u64, u32), u64>) -> Vec<(u64, u32, u64)> {
    queued
        .iter()
        .map(|(&(slot, tid), &ns)| (slot, tid, ns))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mlprof_wire::{Header, Record, Ring};
    use std::time::Instant;

    #[test]
    fn only_spans_that_used_cpu_or_never_ended_are_worth_a_warning() {
        let ms = 1_000_000;
        let span = |tid, from_ns, until_ns, cpu_ns| SigprofBlock {
            tid,
            from_ns,
            until_ns,
            cpu_ns,
            cpu_at_block_ns: None,
        };
        let blocks = [
            span(1, 0, Some(400 * ms), 390 * ms), // a loop with it blocked: 0.39 s misplaced
            span(1, 500 * ms, Some(700 * ms), ms), // subprocess's vfork on a busy machine
            span(2, 800 * ms, None, 0),           // never unblocked, 0.2 s before the end
            span(3, 950 * ms, None, 0),           // never unblocked, but for 50 ms only
        ];
        let told: Vec<u32> = unsampled(&blocks, 1000 * ms)
            .iter()
            .map(|b| b.tid)
            .collect();
        assert_eq!(told, vec![1, 2]);
        assert_eq!(unsampled(&blocks, 1000 * ms)[0].from_ns, 0);
    }

    #[test]
    fn an_open_span_is_worth_a_warning_by_the_cpu_its_thread_used_since() {
        let ms = 1_000_000;
        let open = |tid| SigprofBlock {
            tid,
            from_ns: 0,
            until_ns: None,
            cpu_ns: 0,
            cpu_at_block_ns: None,
        };
        // Thread 1 waits all along (a helper that blocks every signal); thread 2 computes
        // 300 ms after its first look; thread 3 was never read.
        let mut blocks = [open(1), open(2), open(3)];
        let clock = |tid: u32, now: u64| match tid {
            1 => Some(5 * ms),
            2 => Some(now),
            _ => None,
        };
        watch_open_blocks(&mut blocks, |tid| clock(tid, 10 * ms));
        watch_open_blocks(&mut blocks, |tid| clock(tid, 310 * ms));
        assert_eq!(
            blocks.map(|b| (b.cpu_at_block_ns, b.cpu_ns)),
            [(Some(5 * ms), 0), (Some(10 * ms), 300 * ms), (None, 0)]
        );
        let told: Vec<u32> = unsampled(&blocks, 1000 * ms)
            .iter()
            .map(|b| b.tid)
            .collect();
        assert_eq!(told, vec![2, 3]);
    }

    /// A fresh empty directory for one test.
    pub fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mlprof-channels-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The bytes of a valid channel of `slots` slots for `pid` holding `records`, with
    /// `tweak` applied to the header afterwards.
    pub fn image(
        slots: u64,
        pid: u32,
        records: &[Record],
        tweak: impl FnOnce(&mut Header),
    ) -> Vec<u8> {
        let len = mlprof_wire::file_bytes(slots);
        let mut buf = vec![0u64; len.div_ceil(8) + 8];
        let base = buf.as_mut_ptr() as *mut u8;
        let aligned = base.wrapping_add(base.align_offset(64));
        // SAFETY: `aligned..aligned + len` is inside the zeroed, exclusively owned buffer.
        let ring = unsafe { Ring::init(aligned, len, slots, |h| h.pid = pid) }.unwrap();
        for r in records {
            assert!(ring.push(r));
        }
        // SAFETY: the header at the start of the buffer; no view of it is used after this.
        tweak(unsafe { &mut *(aligned as *mut Header) });
        // SAFETY: the same initialised bytes.
        unsafe { std::slice::from_raw_parts(aligned, len) }.to_vec()
    }

    fn sample(depth: u32) -> Record {
        let s = mlprof_wire::Sample {
            weight_ns: 1000,
            depth,
            ..Default::default()
        };
        Record::sample(1, 5, s)
    }

    fn finish(channels: Channels) -> (Vec<ChannelSummary>, Vec<String>) {
        let started = Instant::now();
        let out = channels.finish(1);
        assert!(
            started.elapsed().as_secs() < 5,
            "finish took {:?}",
            started.elapsed()
        );
        out
    }

    #[test]
    fn stray_ring_files_are_skipped_with_a_warning() {
        let d = dir("stray");
        std::fs::write(d.join("4242.1.ring"), image(8, 4242, &[sample(0)], |_| ())).unwrap();
        std::fs::write(d.join("x.ring"), b"").unwrap();
        std::fs::write(d.join("short.ring"), b"MLPROFw\0 garbage").unwrap();
        let mut rng = 0x1234_5678_9abc_def1u64;
        let garbage: Vec<u8> = (0..20_000)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        std::fs::write(d.join("garbage.ring"), garbage).unwrap();
        let version = image(8, 7, &[], |h| h.version = 77);
        std::fs::write(d.join("7.1.ring"), version).unwrap();
        let slots = image(8, 8, &[], |h| h.slots = 1 << 58);
        std::fs::write(d.join("8.1.ring"), slots).unwrap();
        std::fs::create_dir(d.join("dir.ring")).unwrap();
        std::os::unix::fs::symlink(d.join("4242.1.ring"), d.join("link.ring")).unwrap();
        let fifo =
            std::ffi::CString::new(d.join("fifo.ring").into_os_string().into_encoded_bytes())
                .unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        let mut channels = Channels::new(&d, 0);
        channels.scan();
        channels.drain(1);
        channels.scan();
        let (summaries, warnings) = finish(channels);
        assert_eq!(summaries.len(), 1, "{warnings:?}");
        assert_eq!((summaries[0].pid, summaries[0].samples.len()), (4242, 1));
        for name in [
            "x.ring",
            "short.ring",
            "garbage.ring",
            "7.1.ring",
            "8.1.ring",
            "dir.ring",
            "link.ring",
            "fifo.ring",
        ] {
            let hits = warnings.iter().filter(|w| w.contains(name)).count();
            assert_eq!(hits, 1, "one warning for {name}: {warnings:#?}");
        }
        assert!(
            warnings.iter().any(|w| w.contains("version 77")),
            "{warnings:#?}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_snapshot_leaves_the_channels_as_they_were() {
        let d = dir("snapshot");
        std::fs::write(d.join("21.1.ring"), image(64, 21, &[sample(0)], |_| ())).unwrap();
        let code = mlprof_wire::ProcessExit {
            code: 3,
            immediate: false,
        };
        let exited = Record::process_exit(22, 5, code);
        let image22 = image(64, 22, &[sample(0), sample(0), exited], |_| ());
        std::fs::write(d.join("22.1.ring"), image22).unwrap();
        let mut channels = Channels::new(&d, 0);
        channels.scan();
        channels.drain(1);
        let (shared, warnings) = channels.snapshot();
        assert!(warnings.is_empty(), "{warnings:#?}");
        let got: Vec<(u32, usize, bool)> = shared
            .iter()
            .map(|(s, events)| (s.pid, events.samples.len(), s.still_running))
            .collect();
        assert_eq!(
            got,
            [(21, 1, true), (22, 2, false)],
            "the exited one is not running"
        );
        assert!(
            shared.iter().all(|(s, _)| s.samples.is_empty()),
            "events are shared"
        );
        let (summaries, _) = finish(channels);
        let got: Vec<(u32, usize, bool)> = summaries
            .iter()
            .map(|s| (s.pid, s.samples.len(), s.still_running))
            .collect();
        assert_eq!(got, [(21, 1, false), (22, 2, false)]);
        drop(shared);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn stray_files_beyond_the_first_few_are_counted() {
        let d = dir("many");
        for i in 0..MAX_SKIP_WARNINGS + 5 {
            std::fs::write(d.join(format!("junk{i}.ring")), [1u8; 9000]).unwrap();
        }
        let mut channels = Channels::new(&d, 0);
        channels.scan();
        let (_, warnings) = finish(channels);
        assert_eq!(warnings.len(), MAX_SKIP_WARNINGS + 1, "{warnings:#?}");
        assert!(warnings.last().unwrap().starts_with("5 more files"));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A full ring dropped region 2 whole and region 3's begin (its end came alone): with the
    /// channel's `dropped` counter set, that is said as regions lost to a full channel (ids
    /// seen up to 4, two begins), not as malformed records; without drops, the lone end is
    /// malformed.
    #[test]
    fn regions_lost_to_a_full_ring_are_not_called_malformed() {
        let region = |id: u64, phase: u8| {
            let r = mlprof_wire::Region {
                id,
                phase,
                ..Default::default()
            };
            Record::region(1, 5, r)
        };
        use mlprof_wire::region_phase::{BEGIN, END, PEAK};
        let records = [
            region(1, BEGIN),
            region(1, END),
            region(3, PEAK),
            region(3, END),
            region(4, BEGIN),
            region(4, END),
        ];
        for (dropped, want) in [
            (
                5,
                "pid 12 (12.1.ring): 2 regions' records were dropped because the channel was full",
            ),
            (0, "pid 12 (12.1.ring): 2 malformed records dropped"),
        ] {
            let d = dir(&format!("regions-lost-{dropped}"));
            let ring = image(64, 12, &records, |h| {
                h.dropped.0.store(dropped, Ordering::Relaxed)
            });
            std::fs::write(d.join("12.1.ring"), ring).unwrap();
            let mut channels = Channels::new(&d, 0);
            channels.scan();
            channels.drain(1);
            let (summaries, warnings) = finish(channels);
            assert_eq!(summaries[0].regions.len(), 2);
            assert_eq!(warnings.len(), 1, "{warnings:#?}");
            assert!(warnings[0].starts_with(want), "{warnings:#?}");
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[test]
    fn huge_head_is_corruption_not_a_spin() {
        let d = dir("head");
        let good = image(16, 9, &[sample(0), sample(0)], |h| {
            h.head.0.store(1 << 62, Ordering::Relaxed);
        });
        std::fs::write(d.join("9.1.ring"), good).unwrap();
        let mut channels = Channels::new(&d, 0);
        channels.scan();
        channels.drain(1);
        let (summaries, warnings) = finish(channels);
        assert_eq!(summaries.len(), 1);
        assert!(
            warnings.iter().any(|w| w.contains("pid 9 (9.1.ring)")
                && w.contains("ring positions are corrupt")),
            "{warnings:#?}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn records_after_a_dead_writer_hole_are_still_read_and_holes_are_bounded() {
        let d = dir("holes");
        // Head just at the capacity past tail, nothing published: all holes.
        let holes = image(16, 10, &[], |h| h.head.0.store(16, Ordering::Relaxed));
        std::fs::write(d.join("10.1.ring"), holes).unwrap();
        let mut channels = Channels::new(&d, 0);
        channels.scan();
        let (summaries, warnings) = finish(channels);
        assert_eq!(summaries[0].dropped, 16);
        assert!(warnings.is_empty(), "{warnings:#?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn truncated_channel_keeps_what_was_read_and_says_so() {
        let d = dir("trunc");
        let path = d.join("11.1.ring");
        std::fs::write(&path, image(1024, 11, &[sample(0), sample(0)], |_| ())).unwrap();
        let mut channels = Channels::new(&d, 0);
        channels.scan();
        channels.drain(1);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(0).unwrap();
        channels.drain(2);
        channels.drain(3);
        let (summaries, warnings) = finish(channels);
        assert_eq!(summaries[0].samples.len(), 2);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(warnings[0].contains("pid 11 (11.1.ring)") && warnings[0].contains("truncated"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn wiped_header_and_malformed_records_are_reported() {
        let d = dir("wiped");
        let path = d.join("12.1.ring");
        std::fs::write(
            &path,
            image(16, 12, &[sample(0xffff_ffff), sample(1)], |_| ()),
        )
        .unwrap();
        let mut channels = Channels::new(&d, 0);
        channels.scan();
        channels.drain(1);
        // The program overwrites its channel with zeros (same size).
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        std::fs::write(&path, vec![0u8; len]).unwrap();
        channels.drain(2);
        let (summaries, warnings) = finish(channels);
        assert_eq!(summaries[0].samples.len(), 1, "the sane sample is kept");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("pid 12") && w.contains("header became invalid")),
            "{warnings:#?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("pid 12") && w.contains("1 malformed record")),
            "{warnings:#?}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
