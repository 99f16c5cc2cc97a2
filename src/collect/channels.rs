//! The channel files of a run: found by scanning the session directory, drained while the
//! target runs and once more after it ends (SIGKILL included: the files outlive the process).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use mlprof_wire::{python_status, state, Kind, WireError, FILE_SUFFIX};

use super::decode::Decoder;
use super::mapping::Mapping;
use super::recording::ChannelSummary;
use super::waits;
use crate::error::{Error, Result};
use crate::symbolize::native;

struct Channel {
    mapping: Mapping,
    summary: ChannelSummary,
    decoder: Decoder,
}

/// Every channel of the run, keyed by file name (`<pid>.<start_ns>.ring`: unique per image).
pub struct Channels {
    dir: PathBuf,
    open: BTreeMap<PathBuf, Channel>,
    launch_ns: u64,
    /// Pids of channel files still being set up at the last scan.
    pending: Vec<u32>,
}

impl Channels {
    /// Channels of the session directory `dir`; times are made relative to `launch_ns`.
    pub fn new(dir: &Path, launch_ns: u64) -> Channels {
        Channels {
            dir: dir.to_path_buf(),
            open: BTreeMap::new(),
            launch_ns,
            pending: Vec::new(),
        }
    }

    /// Attach channel files that appeared since the last scan. Files still being initialised
    /// are retried next time; a file of another wire version is an error.
    pub fn scan(&mut self) -> Result<()> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        self.pending.clear();
        for entry in entries.flatten() {
            let path = entry.path();
            let is_channel = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(FILE_SUFFIX));
            if !is_channel || self.open.contains_key(&path) {
                continue;
            }
            let Ok(mapping) = Mapping::open(&path) else {
                continue;
            };
            let mut summary = match mapping.ring() {
                Ok(ring) => ChannelSummary::from_header(ring.header(), self.launch_ns),
                Err(WireError::NotReady) => {
                    // `<pid>.<start_ns>.ring`: a process that is attaching right now.
                    let pid = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.split('.').next())
                        .and_then(|p| p.parse::<u32>().ok());
                    self.pending.extend(pid);
                    continue;
                }
                Err(err) => return Err(Error::new(format!("{}: {err}", path.display()))),
            };
            summary.maps = native::read_maps(summary.pid).unwrap_or_default();
            self.open.insert(
                path,
                Channel {
                    mapping,
                    summary,
                    decoder: Decoder::default(),
                },
            );
        }
        Ok(())
    }

    /// Read every published record and refresh the counters of every channel. `now_ns` is
    /// relative to launch.
    pub fn drain(&mut self, now_ns: u64) {
        for channel in self.open.values_mut() {
            channel.drain(now_ns, self.launch_ns);
        }
    }

    /// Off-CPU samples of every live Python process (see `waits`).
    pub fn sample_waits(&mut self, now_ns: u64) {
        let newest = self.newest_live();
        for (path, channel) in self.open.iter_mut() {
            let s = &mut channel.summary;
            if !newest.contains(path)
                || s.py_runtime == 0
                || s.python_status != python_status::WALKED
            {
                continue;
            }
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
            };
            waits::sample(&target, weight, now_ns, &mut channel.decoder.out);
        }
    }

    /// The newest channel of each pid that has not exited.
    fn newest_live(&self) -> Vec<PathBuf> {
        let mut newest: BTreeMap<u32, (u64, &PathBuf)> = BTreeMap::new();
        for (path, channel) in &self.open {
            let s = &channel.summary;
            let slot = newest.entry(s.pid).or_insert((s.start_ns, path));
            if s.start_ns >= slot.0 {
                *slot = (s.start_ns, path);
            }
        }
        newest
            .into_values()
            .filter(|(_, p)| self.open[*p].summary.exit_code.is_none())
            .map(|(_, p)| p.clone())
            .collect()
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

    /// Current heap of each live process (the newest image of each pid that has not exited).
    pub fn live_heaps(&self) -> BTreeMap<u32, i64> {
        let mut newest: BTreeMap<u32, (u64, i64)> = BTreeMap::new();
        for channel in self.open.values() {
            let s = &channel.summary;
            let heap = if s.exit_code.is_some() {
                0
            } else {
                s.heap_current
            };
            let slot = newest.entry(s.pid).or_insert((s.start_ns, heap));
            if s.start_ns >= slot.0 {
                *slot = (s.start_ns, heap);
            }
        }
        newest
            .into_iter()
            .map(|(pid, (_, heap))| (pid, heap))
            .collect()
    }

    /// After the run: drain what is left, skipping slots that a killed writer never published,
    /// and return every channel's summary.
    pub fn finish(mut self, now_ns: u64) -> Vec<ChannelSummary> {
        let _ = self.scan();
        let mut out = Vec::new();
        for channel in self.open.values_mut() {
            channel.drain(now_ns, self.launch_ns);
            while channel.mapping.ring().is_ok_and(|ring| ring.skip_hole()) {
                channel.drain(now_ns, self.launch_ns);
            }
            channel.decoder.finish_pending();
            if let Ok(ring) = channel.mapping.ring() {
                // Nobody reads this channel any more: a process that goes on stops sampling.
                ring.header().collector_gone.store(1, Ordering::Relaxed);
            }
            let decoded = std::mem::take(&mut channel.decoder.out);
            let mut summary = channel.summary.clone();
            summary.samples = decoded.samples;
            summary.allocs = decoded.allocs;
            summary.copies = decoded.copies;
            summary.peak_marks = decoded.peak_marks;
            summary.codes = decoded.codes;
            summary.threads = decoded.threads;
            out.push(summary);
        }
        out.sort_by_key(|s| s.start_ns);
        out
    }
}

/// The collector tick in nanoseconds (weight of the first off-CPU look at a process).
const TICK_NS: u64 = super::TICK.as_nanos() as u64;

/// Whether `ip` falls in an executable mapping of `maps`.
fn covers(maps: &[native::Mapping], ip: u64) -> bool {
    maps.iter()
        .any(|m| m.executable && m.start <= ip && ip < m.end)
}

impl Channel {
    fn drain(&mut self, now_ns: u64, launch_ns: u64) {
        let Ok(ring) = self.mapping.ring() else {
            return;
        };
        let s = &mut self.summary;
        let mut unmapped_ip = false;
        while let Some(record) = ring.pop() {
            s.records += 1;
            match Kind::from_u16(record.kind) {
                Some(Kind::ProcessExit) => {
                    s.exit_code = Some(record.a as i64 as i32);
                    s.exit_ns = Some(record.ts_ns.saturating_sub(launch_ns));
                }
                Some(Kind::Sample) => unmapped_ip |= !covers(&s.maps, record.a),
                _ => {}
            }
            self.decoder.feed(&record, launch_ns);
        }
        if unmapped_ip && s.exit_code.is_none() {
            // A library loaded since the last look (dlopen): read the map again while the
            // process is alive.
            if let Ok(maps) = native::read_maps(s.pid) {
                s.maps = maps;
            }
        }
        let header = ring.header();
        if header.state.load(Ordering::Acquire) == state::EXITED && s.exit_code.is_none() {
            s.exit_code = Some(header.exit_code.load(Ordering::Relaxed));
            s.exit_ns = Some(
                header
                    .exit_ns
                    .load(Ordering::Relaxed)
                    .saturating_sub(launch_ns),
            );
        }
        s.python_status = header.python_status.load(Ordering::Relaxed);
        s.py_runtime = header.py_runtime.load(Ordering::Relaxed);
        s.py_code_type = header.py_code_type.load(Ordering::Relaxed);
        s.sample_interval_ns = header.sample_interval_ns.load(Ordering::Relaxed) as u64;
        let peak = header.heap.peak.load(Ordering::Relaxed);
        if peak > s.heap_peak {
            s.heap_peak = peak;
            s.heap_peak_seen_ns = now_ns;
        }
        s.heap_current = header.heap.current.load(Ordering::Relaxed);
        s.alloc_bytes = header.heap.total.load(Ordering::Relaxed);
        s.alloc_count = header.heap.count.load(Ordering::Relaxed);
        s.dropped = ring.dropped();
    }
}
