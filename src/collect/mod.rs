//! The collector: while the profiled command runs, drain every process's channel and poll
//! `/proc` at a fixed tick; when it ends (however it ends), drain once more. Produces a
//! [`Recording`] of raw facts.

pub mod attach;
pub(crate) mod channels;
mod compact;
pub(crate) mod decode;
mod dir_change;
pub(crate) mod events;
mod footprint;
pub mod gpu;
pub(crate) mod gpu_calls;
mod gpu_kernels;
mod gpu_tensors;
pub mod interpreter;
mod mapping;
mod pace;
mod perf;
pub mod procfs;
mod procfs_files;
mod remote;
mod rows;
mod sigbus;
mod space;
mod waits;

use std::collections::BTreeMap;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Duration;

use crate::recording::{
    between, ChannelSummary, ChildExit, ProcSummary, ProfilerCost, Recording, Setup, Tick, Usage,
};
pub use events::Events;

use crate::error::Result;
use crate::launch::{Forwarding, Launched, Session};
use channels::Channels;
use std::sync::atomic::Ordering;

/// How often the collector drains channels, polls `/proc` and looks for waiting threads
/// (RSS is polled at >= 50 Hz by contract; faster costs the machine more than it tells).
pub const TICK: Duration = Duration::from_millis(20);

/// `CLOCK_MONOTONIC` nanoseconds (the clock the preload library stamps records with).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Profiles of the run so far, taken while it goes on (`--snapshot-every`,
/// `--snapshot-on-signal`): after a tick, the collector hands what it has drained so far to
/// the sink as a [`Snapshot`], and the sink makes and writes the profile elsewhere.
pub struct Snapshots<'a> {
    /// Take one this often (the first one this long after launch).
    pub every: Option<Duration>,
    /// Where they go; `None`: no snapshots, whatever is asked.
    pub sink: Option<&'a dyn SnapshotSink>,
    /// Who answers regions that end asking for a report (`mlprof_region_end` with `report`):
    /// after the tick that decoded such an end, it gets a snapshot and the regions asked for.
    pub regions: Option<&'a dyn RegionSink>,
}

/// A region whose report the program waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionRequest {
    /// Its process.
    pub pid: u32,
    /// Its channel's start (ns from launch): which image of the pid.
    pub start_ns: u64,
    /// The region's id.
    pub id: u64,
    /// Its lines and HTML page are wanted too (a notebook cell's report).
    pub page: bool,
}

/// What answers region report requests (see [`Snapshots::regions`]).
pub trait RegionSink {
    /// Report these regions from this snapshot; returns at once (the work is done elsewhere).
    fn report(&self, snapshot: Snapshot, requests: Vec<RegionRequest>);
}

/// What takes the collector's snapshots.
pub trait SnapshotSink {
    /// Whether the previous snapshot is done (and has dropped its [`Snapshot`]): snapshots
    /// never queue up behind a slow one.
    fn idle(&self) -> bool;
    /// Take this snapshot of the run so far; returns at once (the work is done elsewhere).
    fn take(&self, snapshot: Snapshot);
}

/// The run so far as the collector hands it over: a [`Recording`] whose sampled events and
/// ticks are shared with the collector rather than copied, so that taking it costs the
/// collector only what arrived since the previous snapshot. [`Snapshot::into_recording`]
/// makes the copy, on the thread that makes the profile.
pub struct Snapshot {
    /// Everything but the shared parts (the channels' events and the ticks are empty).
    recording: Recording,
    /// The sampled events of each channel of `recording.channels`, in the same order.
    events: Vec<Arc<Events>>,
    /// The ticks.
    ticks: Arc<Vec<Tick>>,
    /// The run's directory and launch time, where the traces of PyTorch's allocator are read
    /// from (those of processes that have ended; the others say they are still recording).
    tensors: (std::path::PathBuf, u64),
}

impl Snapshot {
    /// The recording cut to the channels `keep` accepts, with only their events from `from_ns`
    /// (ns from launch) on copied: what a region that began then needs, at the cost of its own
    /// events rather than the whole run's.
    pub fn recording_from(self, from_ns: u64, keep: impl Fn(&ChannelSummary) -> bool) -> Recording {
        let Snapshot {
            mut recording,
            events,
            ticks,
            ..
        } = self;
        let mut channels = Vec::new();
        // A process left out but alive since `from_ns` has its heap in the ticks' sums: they
        // are then not the kept processes' heap (pytest-xdist's other worker, its controller),
        // and a region's cut must not take its peak instant from them.
        let mut outsider_alive = false;
        for (mut channel, events) in recording.channels.into_iter().zip(events) {
            if !keep(&channel) {
                outsider_alive |= channel.exit_ns.is_none_or(|e| e >= from_ns);
                continue;
            }
            channel.samples = between(&events.samples, from_ns, u64::MAX, false);
            channel.allocs = between(&events.allocs, from_ns, u64::MAX, false);
            channel.copies = between(&events.copies, from_ns, u64::MAX, false);
            channel.peak_marks = events
                .peak_marks
                .iter()
                .filter(|m| m.0 >= from_ns)
                .copied()
                .collect();
            channel.window_ns = events.window_ns;
            channels.push(channel);
        }
        recording.channels = channels;
        recording.ticks = ticks
            .iter()
            .filter(|t| t.t_ns >= from_ns)
            .map(|t| Tick {
                heap_bytes: if outsider_alive { 0 } else { t.heap_bytes },
                ..*t
            })
            .collect();
        recording
    }

    /// The channels' summaries (their events are in the shared parts).
    pub fn channels(&self) -> &[ChannelSummary] {
        &self.recording.channels
    }

    /// The whole recording, its shared parts copied and let go (so that the collector adds
    /// to them again without copying), with the allocator traces written so far.
    pub fn into_recording(self) -> Recording {
        let Snapshot {
            mut recording,
            events,
            ticks,
            tensors: (dir, launch_ns),
        } = self;
        let (traces, unread) = gpu_tensors::read(&dir, launch_ns);
        recording.gpu_tensors = traces;
        recording.warnings.extend(unread);
        for (channel, events) in recording.channels.iter_mut().zip(events) {
            channel.samples = events.samples.clone();
            channel.allocs = events.allocs.clone();
            channel.alloc_groups = events.alloc_groups.clone();
            channel.window_ns = events.window_ns;
            channel.merged_cpu_samples = events.merged_cpu_samples;
            channel.copies = events.copies.clone();
            channel.peak_marks = events.peak_marks.clone();
        }
        recording.ticks = ticks.to_vec();
        recording
    }
}

/// The footprint at each tick: appended to by the collector, shared with snapshots. At most
/// [`MAX_TICKS`] are kept: when they are reached, neighbours are merged in pairs (the first's
/// time, the larger heap and RSS, so that peaks stay), and from then on each kept tick stands
/// for twice as many.
struct Ticks {
    /// Up to the last snapshot.
    shared: Arc<Vec<Tick>>,
    /// Since.
    recent: Vec<Tick>,
    /// Ticks taken.
    count: u64,
    /// Ticks each kept one stands for.
    per: u64,
    /// Ticks the last kept one of `recent` stands for so far.
    in_last: u64,
}

/// Most ticks kept (a profile's timeline has at most `model::timeline::MAX_POINTS`).
const MAX_TICKS: usize = 8192;

impl Default for Ticks {
    fn default() -> Self {
        Ticks {
            shared: Arc::default(),
            recent: Vec::new(),
            count: 0,
            per: 1,
            in_last: 0,
        }
    }
}

/// `b` merged into `a`.
fn merge_tick(a: &mut Tick, b: &Tick) {
    a.heap_bytes = a.heap_bytes.max(b.heap_bytes);
    a.rss_bytes = a.rss_bytes.max(b.rss_bytes);
    a.mapped_bytes = a.mapped_bytes.max(b.mapped_bytes);
    a.anon_bytes = a.anon_bytes.max(b.anon_bytes);
}

impl Ticks {
    fn len(&self) -> usize {
        self.shared.len() + self.recent.len()
    }

    fn push(&mut self, tick: Tick) {
        self.count += 1;
        if let Some(last) = self.recent.last_mut().filter(|_| self.in_last < self.per) {
            merge_tick(last, &tick);
            self.in_last += 1;
            return;
        }
        self.recent.push(tick);
        self.in_last = 1;
        if self.len() >= MAX_TICKS {
            let all = Arc::make_mut(&mut self.shared);
            all.append(&mut self.recent);
            let merged: Vec<Tick> = all
                .chunks(2)
                .map(|pair| {
                    let mut t = pair[0];
                    if let Some(b) = pair.get(1) {
                        merge_tick(&mut t, b);
                    }
                    t
                })
                .collect();
            *all = merged;
            self.per *= 2;
            self.in_last = self.per; // the next tick starts a new one
        }
    }

    /// All ticks so far, shared (costs the ticks since the last call, unless the last
    /// snapshot still holds its share).
    fn share(&mut self) -> Arc<Vec<Tick>> {
        Arc::make_mut(&mut self.shared).append(&mut self.recent);
        self.shared.clone()
    }

    fn into_vec(self) -> Vec<Tick> {
        let mut all = Arc::try_unwrap(self.shared).unwrap_or_else(|shared| shared.to_vec());
        all.extend(self.recent);
        all
    }
}

/// Collect until the launched command ends, then while descendants it left running are alive,
/// for at most `outlive_wait` more (the orphan policy: see docs/design/process-trees.md).
/// `launch_ns` is when the command was started. Snapshots are taken at the end of a tick when
/// due (`snapshots.every`) or asked for (`forwarding`'s snapshot request).
pub fn record(
    session: &Session,
    launched: Launched,
    launch_ns: u64,
    outlive_wait: Duration,
    forwarding: &Forwarding,
    snapshots: &Snapshots,
) -> Result<Recording> {
    let mut c = Collector {
        channels: Channels::new(session.dir(), launch_ns),
        procs: BTreeMap::new(),
        footprint: footprint::Footprint::new(0),
        ticks: Ticks::default(),
        space: space::SpaceWatch::new(session.dir()),
        child: launched.pid,
        launch_ns,
        regions_asked: false,
        setup: Setup {
            memory_sample_bytes: launched.sampling.memory_sample_bytes,
            copy_sample_bytes: launched.sampling.copy_sample_bytes,
            cpus: cpus(),
            attached: false,
        },
    };
    let mut schedule = Schedule::new(snapshots);
    let exit: ChildExit = 'run: loop {
        c.tick();
        schedule.after_tick(&mut c, forwarding, session.dir(), None);
        let next_tick = std::time::Instant::now() + TICK;
        loop {
            match c.wait_until(&launched.exited, next_tick) {
                Waited::Exited(exit) => break 'run exit,
                Waited::Gone => break 'run ChildExit::default(),
                Waited::Tick => break,
                Waited::Request => {
                    // A program waits for a region's report: drain and answer now, the rest
                    // of the tick's work at the tick.
                    c.drain_now();
                    schedule.answer_regions(&mut c, session.dir(), None);
                }
            }
        }
    };
    forwarding.reaped.store(true, Ordering::Release);
    let wall_ns = monotonic_ns().saturating_sub(launch_ns);
    let deadline = std::time::Instant::now() + outlive_wait;
    // A fresh look first: a child that started just before the command ended may not have
    // been seen yet (or may still be setting up its channel).
    c.tick();
    let mut running = c.channels.running_descendants(launched.pid);
    while !running.is_empty()
        && std::time::Instant::now() < deadline
        && !forwarding.interrupted.load(Ordering::Acquire)
    {
        std::thread::sleep(TICK);
        c.tick();
        schedule.after_tick(&mut c, forwarding, session.dir(), Some((&exit, wall_ns)));
        running = c.channels.running_descendants(launched.pid);
    }
    let end_ns = monotonic_ns().saturating_sub(launch_ns);
    let profiler = c.cost();
    let (mut summaries, mut warnings) = c.channels.finish(end_ns);
    if !running.is_empty() {
        for s in summaries.iter_mut().filter(|s| running.contains(&s.pid)) {
            s.still_running = true;
        }
        warnings.push(outlived_note(&running, &summaries, outlive_wait));
    }
    warnings.extend(c.space.warning(session.dir()));
    let (gpu_tensors, unread) = gpu_tensors::read(session.dir(), launch_ns);
    warnings.extend(unread);
    Ok(Recording {
        command: Vec::new(),
        wall_ns,
        child_pid: launched.pid,
        exit,
        channels: summaries,
        procs: c.procs.into_values().collect(),
        ticks: c.ticks.into_vec(),
        warnings,
        labels: labels(),
        gpu: Default::default(),
        gpu_tensors,
        setup: c.setup,
        profiler,
    })
}

/// The collector's state between ticks.
struct Collector {
    channels: Channels,
    procs: BTreeMap<u32, ProcSummary>,
    /// The tree's footprint from `/proc`, at a bounded cost.
    footprint: footprint::Footprint,
    ticks: Ticks,
    space: space::SpaceWatch,
    /// The launched command's pid.
    child: u32,
    launch_ns: u64,
    /// A process has asked for a region's report: from then on the wait between ticks looks
    /// for new requests every [`REQUEST_POLL`].
    regions_asked: bool,
    /// How the command is recorded, stamped on every recording made of it.
    setup: Setup,
}

/// CPUs this process may run on (its affinity), as a program it launches inherits it.
pub fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(0, |n| n.get() as u32)
}

/// What ended a wait between ticks.
enum Waited {
    /// The command exited.
    Exited(ChildExit),
    /// Its exit can no longer be learnt.
    Gone,
    /// Time for the next tick.
    Tick,
    /// A process asked for a region's report.
    Request,
}

/// How often, once regions ask for reports, the collector looks for a new request between
/// ticks (a read of each channel's header): a test waiting for its lines waits about this long
/// for the collector to start, not a tick.
const REQUEST_POLL: Duration = Duration::from_millis(1);

impl Collector {
    /// Wait for the command's exit until `deadline` (the next tick), or until a process asks
    /// for a region's report.
    fn wait_until(
        &mut self,
        exited: &std::sync::mpsc::Receiver<ChildExit>,
        deadline: std::time::Instant,
    ) -> Waited {
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Waited::Tick;
            }
            let step = if self.regions_asked {
                left.min(REQUEST_POLL)
            } else {
                left
            };
            match exited.recv_timeout(step) {
                Ok(exit) => return Waited::Exited(exit),
                Err(RecvTimeoutError::Disconnected) => return Waited::Gone,
                Err(RecvTimeoutError::Timeout) => {
                    if self.channels.region_requests_waiting() {
                        self.regions_asked = true;
                        return Waited::Request;
                    }
                }
            }
        }
    }

    /// Find new channels and drain every channel now (between ticks): a region's report must
    /// see the processes it started since the last tick (a fork child that allocated and
    /// exited within 20 ms was missing from a pytest test's children under load).
    fn drain_now(&mut self) {
        let now = monotonic_ns().saturating_sub(self.launch_ns);
        self.channels.scan();
        self.channels.drain(now);
    }

    /// What the profiler's process has cost so far.
    fn cost(&self) -> ProfilerCost {
        ProfilerCost {
            cpu_ns: pace::process_cpu_ns(),
            proc_reads_ns: self.footprint.spent_ns(),
            waits_ns: self.channels.waits_spent_ns(),
        }
    }

    /// One tick: scan, drain, look at waiting threads, poll `/proc`.
    fn tick(&mut self) {
        let now = monotonic_ns().saturating_sub(self.launch_ns);
        self.space.tick(now);
        self.channels.scan();
        self.channels.drain(now);
        self.channels.sample_waits(now);
        let with_hwm = self.ticks.count.is_multiple_of(footprint::HWM_EVERY);
        let heaps = self.channels.live_heaps();
        let mut pids = vec![self.child];
        pids.extend(heaps.keys().copied().filter(|&pid| pid != self.child));
        let forks = heaps.iter().filter(|(_, h)| h.forked);
        let forks = forks.map(|(&pid, h)| {
            let made = u64::try_from(h.heap).unwrap_or(0) + h.mapped;
            let fork = footprint::Fork::new(made, h.fork_ns, h.start_ns, h.ppid);
            (pid, fork)
        });
        self.footprint.set_forks(forks.collect());
        let rss = self
            .footprint
            .poll(&pids, self.child, &mut self.procs, now, with_hwm);
        let heap_bytes = heaps.values().map(|h| h.heap.max(0) as u64).sum();
        let mapped_bytes = heaps.values().map(|h| h.mapped).sum();
        self.ticks
            .push(footprint::tick(now, heap_bytes, mapped_bytes, rss));
    }

    /// The recording of the run so far, its events shared (collection goes on; see
    /// [`Snapshot`]). While the command runs (`reaped` is `None`) its exit is unknown, its
    /// CPU time is what `/proc` says and its wall time is now; afterwards, what was reaped.
    /// Processes still running are marked so, and the first warning says this is a snapshot.
    fn snapshot(&mut self, dir: &std::path::Path, reaped: Option<(&ChildExit, u64)>) -> Snapshot {
        let now_ns = monotonic_ns().saturating_sub(self.launch_ns);
        let (shared, channel_warnings) = self.channels.snapshot();
        let (mut channels, events): (Vec<ChannelSummary>, Vec<Arc<Events>>) =
            shared.into_iter().unzip();
        let (exit, wall_ns, note) = match reaped {
            Some((exit, wall_ns)) => {
                for s in channels.iter_mut().filter(|s| s.pid == self.child) {
                    s.still_running = false;
                }
                (
                    *exit,
                    wall_ns,
                    "processes the command started were still running",
                )
            }
            None => {
                let (user_s, kernel_s) = procfs::usage(self.child).unwrap_or_default();
                let usage = Usage {
                    user_s,
                    kernel_s,
                    maxrss_bytes: self.procs.get(&self.child).map_or(0, |p| p.peak_rss_bytes),
                };
                let exit = ChildExit {
                    usage,
                    ..ChildExit::default()
                };
                (
                    exit,
                    now_ns,
                    "the program was still running and its exit is not known yet",
                )
            }
        };
        let mut warnings = vec![format!(
            "snapshot at {:.1} s: {note}; figures cover the run until then, and the report \
             written when it ends replaces this one",
            now_ns as f64 / 1e9
        )];
        warnings.extend(channel_warnings);
        warnings.extend(self.space.warning(dir));
        Snapshot {
            recording: Recording {
                command: Vec::new(),
                wall_ns,
                child_pid: self.child,
                exit,
                channels,
                procs: self.procs.values().copied().collect(),
                ticks: Vec::new(),
                warnings,
                labels: labels(),
                gpu: Default::default(),
                gpu_tensors: Vec::new(),
                setup: self.setup,
                profiler: self.cost(),
            },
            events,
            ticks: self.ticks.share(),
            tensors: (dir.to_path_buf(), self.launch_ns),
        }
    }
}

/// When the next snapshot is due.
struct Schedule<'a> {
    plan: &'a Snapshots<'a>,
    next: Option<std::time::Instant>,
    /// One was asked for (a signal) and not taken yet (the sink was busy).
    asked: bool,
}

impl<'a> Schedule<'a> {
    fn new(plan: &'a Snapshots<'a>) -> Schedule<'a> {
        Schedule {
            plan,
            next: plan.every.map(|every| std::time::Instant::now() + every),
            asked: false,
        }
    }

    /// Hand the regions that ended asking for a report, with a snapshot, to whoever answers.
    fn answer_regions(
        &mut self,
        c: &mut Collector,
        dir: &std::path::Path,
        reaped: Option<(&ChildExit, u64)>,
    ) {
        if let Some(regions) = self.plan.regions {
            let requests = c.channels.take_report_requests();
            if !requests.is_empty() {
                regions.report(c.snapshot(dir, reaped), requests);
            }
        }
    }

    /// After a tick: hand a snapshot to the sink if one is due or was asked for and the sink
    /// is free (else it is taken at the first tick that finds the sink free).
    fn after_tick(
        &mut self,
        c: &mut Collector,
        forwarding: &Forwarding,
        dir: &std::path::Path,
        reaped: Option<(&ChildExit, u64)>,
    ) {
        self.answer_regions(c, dir, reaped);
        let Some(sink) = self.plan.sink else {
            return;
        };
        self.asked |= forwarding.take_snapshot_request();
        let now = std::time::Instant::now();
        let due = self.next.is_some_and(|next| now >= next);
        if !(due || self.asked) || !sink.idle() {
            return;
        }
        sink.take(c.snapshot(dir, reaped));
        self.asked = false;
        if let Some(every) = self.plan.every {
            self.next = Some(now + every);
        }
    }
}

/// The warning about descendants still running when collection stopped.
fn outlived_note(running: &[u32], summaries: &[ChannelSummary], waited: Duration) -> String {
    let named: Vec<String> = running
        .iter()
        .take(5)
        .map(|pid| {
            let command = summaries
                .iter()
                .rev()
                .find(|s| s.pid == *pid)
                .and_then(|s| s.command.first())
                .map_or("?", |c| c.rsplit('/').next().unwrap_or(c));
            format!("{pid} ({command})")
        })
        .collect();
    let more = running.len().saturating_sub(named.len());
    format!(
        "{} process{} still running {:.1} s after the command ended: {}{}; {} figures cover the \
         time until then and {} left running (--wait-children sets the wait)",
        running.len(),
        if running.len() == 1 {
            " was"
        } else {
            "es were"
        },
        waited.as_secs_f64(),
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        if running.len() == 1 { "its" } else { "their" },
        if running.len() == 1 {
            "it was"
        } else {
            "they were"
        },
    )
}

/// `host` and the distributed-training rank variables that are set.
fn labels() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into our buffer.
    if unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0 {
        let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        out.insert(
            "host".to_string(),
            String::from_utf8_lossy(&name[..len]).into_owned(),
        );
    }
    if let Some((rank, local, size)) = crate::launch::env_rank() {
        out.insert("rank".to_string(), rank);
        out.extend(local.map(|l| ("local_rank".to_string(), l)));
        out.extend(size.map(|w| ("world_size".to_string(), w)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_week_of_ticks_is_bounded_and_keeps_its_peaks() {
        let mut ticks = Ticks::default();
        let week = 7 * 24 * 3600 * 50u64; // 50 ticks a second
        for i in 0..week {
            let spike = i == week / 3;
            ticks.push(Tick {
                t_ns: i * 20_000_000,
                heap_bytes: if spike { 1 << 40 } else { 1 << 20 },
                rss_bytes: 2 << 20,
                mapped_bytes: 0,
                anon_bytes: 0,
            });
            if i % 1_000_000 == 0 {
                ticks.share(); // a snapshot now and then
            }
        }
        assert_eq!(ticks.count, week);
        let all = ticks.into_vec();
        assert!(all.len() <= MAX_TICKS, "{} ticks kept", all.len());
        assert!(all.len() > MAX_TICKS / 4, "{} ticks kept", all.len());
        let top = all.iter().max_by_key(|t| t.heap_bytes).expect("ticks");
        assert_eq!(top.heap_bytes, 1 << 40);
        let at = week / 3 * 20_000_000;
        let width = 20_000_000 * week / all.len() as u64;
        assert!(
            top.t_ns <= at && at - top.t_ns <= 2 * width,
            "{} vs {at}",
            top.t_ns
        );
        assert!(all.windows(2).all(|p| p[0].t_ns < p[1].t_ns));
    }
}
