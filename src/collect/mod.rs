//! The collector: while the profiled command runs, drain every process's channel and poll
//! `/proc` at a fixed tick; when it ends (however it ends), drain once more. Produces a
//! [`Recording`] of raw facts.

mod channels;
mod decode;
#[cfg(test)]
mod fuzz_tests;
pub mod gpu;
mod mapping;
pub mod procfs;
pub mod recording;
mod remote;
mod sigbus;
mod space;
mod waits;

use std::collections::BTreeMap;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

pub use recording::{
    AllocSample, ChannelSummary, CodeInfo, CopySample, CpuSample, ProcSummary, Recording, Tick,
};

use crate::error::Result;
use crate::launch::{ChildExit, Forwarding, Launched, Session};
use channels::Channels;
use std::sync::atomic::Ordering;

/// How often the collector drains channels, polls `/proc` and looks for waiting threads
/// (RSS is polled at >= 50 Hz by contract; faster costs the machine more than it tells).
pub const TICK: Duration = Duration::from_millis(20);
/// The kernel's RSS high-water mark is read every this many ticks (and the current RSS at every
/// tick), because its file is several times costlier to read.
const HWM_EVERY: u64 = 5;

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

/// Collect until the launched command ends, then while descendants it left running are alive,
/// for at most `outlive_wait` more (the orphan policy: see docs/design/process-trees.md).
/// `launch_ns` is when the command was started.
pub fn record(
    session: &Session,
    launched: Launched,
    launch_ns: u64,
    outlive_wait: Duration,
    forwarding: &Forwarding,
) -> Result<Recording> {
    let mut channels = Channels::new(session.dir(), launch_ns);
    let mut procs: BTreeMap<u32, ProcSummary> = BTreeMap::new();
    let mut ticks = Vec::new();
    let mut space = space::SpaceWatch::new(session.dir());
    let mut tick = |channels: &mut Channels, ticks: &mut Vec<Tick>| -> Result<()> {
        let now = monotonic_ns().saturating_sub(launch_ns);
        space.tick(now);
        channels.scan();
        channels.drain(now);
        channels.sample_waits(now);
        let with_hwm = (ticks.len() as u64).is_multiple_of(HWM_EVERY);
        ticks.push(poll(channels, launched.pid, &mut procs, now, with_hwm));
        Ok(())
    };
    let exit: ChildExit = loop {
        tick(&mut channels, &mut ticks)?;
        match launched.exited.recv_timeout(TICK) {
            Ok(exit) => break exit,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break ChildExit::default(),
        }
    };
    forwarding.reaped.store(true, Ordering::Release);
    let wall_ns = monotonic_ns().saturating_sub(launch_ns);
    let deadline = std::time::Instant::now() + outlive_wait;
    // A fresh look first: a child that started just before the command ended may not have
    // been seen yet (or may still be setting up its channel).
    tick(&mut channels, &mut ticks)?;
    let mut running = channels.running_descendants(launched.pid);
    while !running.is_empty()
        && std::time::Instant::now() < deadline
        && !forwarding.interrupted.load(Ordering::Acquire)
    {
        std::thread::sleep(TICK);
        tick(&mut channels, &mut ticks)?;
        running = channels.running_descendants(launched.pid);
    }
    let end_ns = monotonic_ns().saturating_sub(launch_ns);
    let (mut summaries, mut warnings) = channels.finish(end_ns);
    if !running.is_empty() {
        for s in summaries.iter_mut().filter(|s| running.contains(&s.pid)) {
            s.still_running = true;
        }
        warnings.push(outlived_note(&running, &summaries, outlive_wait));
    }
    warnings.extend(space.warning(session.dir()));
    Ok(Recording {
        command: Vec::new(),
        wall_ns,
        child_pid: launched.pid,
        exit,
        channels: summaries,
        procs: procs.into_values().collect(),
        ticks,
        warnings,
        labels: labels(),
        gpu: Default::default(),
    })
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

/// One tick: read `/proc` for the child and every process with a channel; sum the footprint.
fn poll(
    channels: &Channels,
    child: u32,
    procs: &mut BTreeMap<u32, ProcSummary>,
    now: u64,
    with_hwm: bool,
) -> Tick {
    let heaps = channels.live_heaps();
    let mut pids: Vec<u32> = heaps.keys().copied().collect();
    if !heaps.contains_key(&child) {
        pids.push(child);
    }
    let mut rss_bytes = 0;
    for pid in pids {
        let first = !procs.contains_key(&pid);
        let Some(reading) = procfs::read(pid, with_hwm || first) else {
            continue;
        };
        rss_bytes += reading.rss_bytes;
        let entry = procs.entry(pid).or_insert(ProcSummary {
            pid,
            ..ProcSummary::default()
        });
        entry.peak_rss_bytes = entry
            .peak_rss_bytes
            .max(reading.hwm_bytes)
            .max(reading.rss_bytes);
        entry.cpu_s = reading.cpu_s;
    }
    let heap_bytes = heaps.values().map(|&h| h.max(0) as u64).sum();
    Tick {
        t_ns: now,
        heap_bytes,
        rss_bytes,
    }
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
    for var in ["RANK", "LOCAL_RANK", "WORLD_SIZE"] {
        if let Ok(value) = std::env::var(var) {
            out.insert(var.to_ascii_lowercase(), value);
        }
    }
    out
}
