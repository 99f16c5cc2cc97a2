//! GPU polls → the `gpu` summary, per-process GPU memory, and per-line estimates: "GPU busy
//! while this line ran" and GPU memory growth while it ran. Pure.
//!
//! Only processes of the profiled tree count, and only while NVML lists them with a GPU
//! context: device-wide utilisation is never charged to a process without one. A line's figures
//! come from the CPU and waiting samples of its process: a sample at time t belongs to the poll
//! interval ending at the first poll at or after t; the line is charged that interval's SM
//! utilisation of its process, weighted by the sample's time, and a share of the process's
//! GPU memory growth in the interval in proportion to its samples there. GPU work is
//! asynchronous, so these are estimates of what ran beside the line, not what it launched.

use std::collections::{BTreeSet, HashMap};

use super::places::{Acc, Place};
use super::profile::{Gpu, GpuDevice, GpuSample};
use crate::recording::gpu::GpuRecording;

/// How many polls away a growth without samples may look for the lines it goes to.
const NEAREST_POLLS: usize = 20;

/// One tree process's GPU figures, one entry per poll.
struct Series {
    /// Listed by NVML with a GPU context at the poll.
    present: Vec<bool>,
    /// SM utilisation of the process over the interval ending at the poll, if known.
    util_pct: Vec<Option<f64>>,
    /// GPU memory it used at the poll (all devices).
    memory: Vec<u64>,
}

/// Joins samples to polls while the CPU samples are placed, then spreads memory growth.
pub struct Joiner {
    poll_ns: Vec<u64>,
    series: HashMap<u32, Series>,
    observed: HashMap<(u32, usize), Vec<(Place, u64)>>,
}

impl Joiner {
    /// For the processes `tree` (pids as the channels report them).
    pub fn new(gpu: &GpuRecording, tree: &BTreeSet<u32>) -> Joiner {
        let n = gpu.polls.len();
        let mut series: HashMap<u32, Series> = HashMap::new();
        for (k, poll) in gpu.polls.iter().enumerate() {
            // A process on several devices: the mean of its devices' utilisation.
            let mut devices_of: HashMap<u32, u32> = HashMap::new();
            for row in poll.processes.iter().filter(|r| tree.contains(&r.pid)) {
                *devices_of.entry(row.pid).or_default() += 1;
            }
            for row in poll.processes.iter().filter(|r| tree.contains(&r.pid)) {
                let s = series.entry(row.pid).or_insert_with(|| Series {
                    present: vec![false; n],
                    util_pct: vec![None; n],
                    memory: vec![0; n],
                });
                s.present[k] = true;
                s.memory[k] += row.memory_bytes;
                let util = match row.sm_util_pct {
                    Some(u) => Some(u as f64),
                    // Without per-process samples, the device's utilisation is this process's
                    // only when every process on the device belongs to the tree.
                    None => poll
                        .processes
                        .iter()
                        .filter(|r| r.device == row.device)
                        .all(|r| tree.contains(&r.pid))
                        .then(|| {
                            poll.devices
                                .iter()
                                .find(|d| d.index == row.device)
                                .map(|d| d.util_pct as f64)
                        })
                        .flatten(),
                };
                if let Some(u) = util {
                    let share = u / devices_of[&row.pid].max(1) as f64;
                    let slot = s.util_pct[k].get_or_insert(0.0);
                    *slot = (*slot + share).min(100.0);
                }
            }
        }
        Joiner {
            poll_ns: gpu.polls.iter().map(|p| p.t_ns).collect(),
            series,
            observed: HashMap::new(),
        }
    }

    /// A sample of process `pid` at `t_ns` standing for `weight_ns`, placed at `place`; from a
    /// thread running Python (`python_thread`: only those share memory growth, since pool
    /// threads joined to a line do not allocate GPU memory for it).
    pub fn observe(
        &mut self,
        pid: u32,
        t_ns: u64,
        weight_ns: u64,
        place: &Place,
        python_thread: bool,
        acc: &mut Acc,
    ) {
        let Some(s) = self.series.get(&pid) else {
            return;
        };
        let k = self.poll_ns.partition_point(|&p| p < t_ns);
        if k >= self.poll_ns.len() || !s.present[k] {
            return;
        }
        if let Some(u) = s.util_pct[k] {
            acc.gpu_time_ns += weight_ns;
            acc.gpu_busy_ns += weight_ns as f64 * u / 100.0;
        }
        if !python_thread {
            return;
        }
        self.observed
            .entry((pid, k))
            .or_default()
            .push((place.clone(), weight_ns));
    }

    /// Spread each process's GPU memory growth over the places sampled in the interval where it
    /// grew (or the nearest interval with samples).
    pub fn finish(self, places: &mut HashMap<Place, Acc>) {
        for (pid, s) in &self.series {
            for k in 0..s.present.len() {
                let before = if k > 0 && s.present[k - 1] {
                    s.memory[k - 1]
                } else {
                    0
                };
                let growth = s.memory[k].saturating_sub(before);
                if !s.present[k] || growth == 0 {
                    continue;
                }
                let Some(seen) = self.nearest_observed(*pid, k) else {
                    continue;
                };
                let total: u64 = seen.iter().map(|(_, w)| w).sum();
                for (place, w) in seen {
                    let share = growth as f64 * *w as f64 / total.max(1) as f64;
                    places.entry(place.clone()).or_default().gpu_memory_bytes += share;
                }
            }
        }
    }

    /// The samples of the interval `k`, else of the nearest interval with samples, at most
    /// [`NEAREST_POLLS`] away (a process that is never sampled keeps its growth to itself).
    fn nearest_observed(&self, pid: u32, k: usize) -> Option<&Vec<(Place, u64)>> {
        let n = self.poll_ns.len();
        (0..n.min(NEAREST_POLLS)).find_map(|d| {
            let earlier = k.checked_sub(d).and_then(|i| self.observed.get(&(pid, i)));
            earlier.or_else(|| self.observed.get(&(pid, k + d)).filter(|_| k + d < n))
        })
    }
}

/// The `gpu` summary of the tree `tree`, and each tree process's peak GPU memory.
pub fn summary(gpu: &GpuRecording, tree: &BTreeSet<u32>) -> (Gpu, HashMap<u32, u64>) {
    let mut peaks: HashMap<u32, u64> = HashMap::new();
    if !gpu.available {
        let out = Gpu {
            available: false,
            reason: gpu.reason.clone(),
            ..Gpu::default()
        };
        return (out, peaks);
    }
    // Utilisation is averaged over the devices the tree used (a one-GPU job on an eight-GPU
    // machine can be 100% busy).
    let used: BTreeSet<u32> = gpu
        .polls
        .iter()
        .flat_map(|p| &p.processes)
        .filter(|r| tree.contains(&r.pid))
        .map(|r| r.device)
        .collect();
    let mut timeline = Vec::with_capacity(gpu.polls.len());
    for poll in &gpu.polls {
        let mut memory = 0;
        let mut per_pid: HashMap<u32, u64> = HashMap::new();
        let mut util_by_device: HashMap<u32, f64> = HashMap::new();
        for row in poll.processes.iter().filter(|r| tree.contains(&r.pid)) {
            memory += row.memory_bytes;
            *per_pid.entry(row.pid).or_default() += row.memory_bytes;
            let u = row.sm_util_pct.map(f64::from).or_else(|| {
                let only_ours = poll
                    .processes
                    .iter()
                    .filter(|r| r.device == row.device)
                    .all(|r| tree.contains(&r.pid));
                let device = poll.devices.iter().find(|d| d.index == row.device);
                device.filter(|_| only_ours).map(|d| d.util_pct as f64)
            });
            let slot = util_by_device.entry(row.device).or_default();
            *slot = (*slot + u.unwrap_or(0.0)).min(100.0);
        }
        for (pid, bytes) in per_pid {
            let peak = peaks.entry(pid).or_default();
            *peak = (*peak).max(bytes);
        }
        let devices = poll.devices.len().max(1) as f64;
        timeline.push(GpuSample {
            t_s: poll.t_ns as f64 / 1e9,
            util_pct: util_by_device.values().sum::<f64>() / used.len().max(1) as f64,
            memory_bytes: memory,
            device_util_pct: poll.devices.iter().map(|d| d.util_pct as f64).sum::<f64>() / devices,
            device_memory_bytes: poll.devices.iter().map(|d| d.memory_used).sum(),
        });
    }
    let average = if timeline.is_empty() {
        0.0
    } else {
        timeline.iter().map(|s| s.util_pct).sum::<f64>() / timeline.len() as f64
    };
    let mut notes = gpu.notes.clone();
    if !gpu.process_util {
        notes.push(
            "per-process GPU utilisation is not available from this driver or GPU: utilisation \
             is the device's, counted only while every process on it belonged to the profiled \
             tree"
                .to_string(),
        );
    }
    let rows = || gpu.polls.iter().flat_map(|p| &p.processes);
    if !rows().any(|r| tree.contains(&r.pid)) && rows().any(|r| !r.visible) {
        notes.push(
            "NVML lists GPU processes whose pids this PID namespace cannot see (a container?), \
             so none could be matched to the profiled tree: per-process and per-line GPU \
             figures are missing; the device columns of the timeline still show the GPU"
                .to_string(),
        );
    }
    let out = Gpu {
        available: true,
        reason: None,
        devices: gpu
            .devices
            .iter()
            .map(|d| GpuDevice {
                index: d.index,
                name: d.name.clone(),
                memory_total_bytes: d.memory_total,
            })
            .collect(),
        peak_memory_bytes: timeline.iter().map(|s| s.memory_bytes).max().unwrap_or(0),
        average_util_pct: average,
        timeline,
        notes,
        calls: None,
    };
    (out, peaks)
}
