//! The NVML poller: a collector thread that reads, at `--gpu-rate`, every device's utilisation
//! and memory and every GPU process's memory and SM utilisation (through `nvml-wrapper`, which
//! loads `libnvidia-ml.so.1` at run time). It never touches the profiled processes. Which rows
//! belong to the profiled tree is decided later, from the pids the channels report
//! (`model::gpu`); here a pid NVML reports is only translated through `NSpid` when it is not
//! visible in our PID namespace as it is.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::recording::gpu::{
    DeviceReading, GpuDeviceInfo, GpuPoll, GpuProcessReading, GpuRecording,
};

/// How the GPU is polled.
#[derive(Clone, Debug)]
pub struct GpuOptions {
    /// Poll at all (`--no-gpu` turns it off).
    pub enabled: bool,
    /// The NVML library to load instead of the default (`--gpu-lib`, `MLPROF_NVML_LIB`).
    pub lib: Option<PathBuf>,
    /// Polls per second.
    pub rate_hz: f64,
}

/// A running poller.
pub struct GpuPoller {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    failed: Option<GpuRecording>,
    /// What the poller has seen so far (the thread adds each poll; snapshots copy it).
    seen: Arc<Mutex<GpuRecording>>,
}

/// A view of what a running poller has seen, for snapshots of the run.
#[derive(Clone)]
pub struct GpuView {
    seen: Arc<Mutex<GpuRecording>>,
    failed: Option<GpuRecording>,
}

impl GpuView {
    /// A copy of what the poller has seen so far.
    pub fn current(&self) -> GpuRecording {
        match &self.failed {
            Some(failed) => failed.clone(),
            None => lock(&self.seen).clone(),
        }
    }
}

fn lock(seen: &Mutex<GpuRecording>) -> std::sync::MutexGuard<'_, GpuRecording> {
    seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GpuPoller {
    /// Start polling on a thread of its own, which loads NVML first (that can take a second
    /// or more without persistence mode, and must not delay the launch); `launch_ns` is the
    /// launch time on the monotonic clock.
    pub fn start(options: &GpuOptions, launch_ns: u64) -> GpuPoller {
        let stop = Arc::new(AtomicBool::new(false));
        if !options.enabled {
            return GpuPoller::failed("turned off (--no-gpu)".to_string(), stop);
        }
        let period = Duration::from_secs_f64(1.0 / options.rate_hz.clamp(1.0, 100.0));
        let lib = options.lib.clone();
        let flag = stop.clone();
        let seen = Arc::new(Mutex::new(unavailable(
            "NVML was still loading when this snapshot was taken".to_string(),
        )));
        let out = seen.clone();
        let thread = std::thread::Builder::new()
            .name("mlprof-gpu".to_string())
            .spawn(move || {
                let nvml = match load(lib.as_deref().map(|p| p.as_os_str())) {
                    Ok(nvml) => nvml,
                    Err(reason) => {
                        *lock(&out) = unavailable(reason);
                        return;
                    }
                };
                match device_infos(&nvml) {
                    Ok(d) if !d.is_empty() => poll_loop(nvml, d, period, launch_ns, &flag, &out),
                    Ok(_) => *lock(&out) = unavailable("no NVIDIA GPU found".to_string()),
                    Err(e) => *lock(&out) = unavailable(format!("NVML error: {e}")),
                }
            })
            .ok();
        GpuPoller {
            stop,
            thread,
            failed: None,
            seen,
        }
    }

    fn failed(reason: String, stop: Arc<AtomicBool>) -> GpuPoller {
        GpuPoller {
            stop,
            thread: None,
            failed: Some(unavailable(reason)),
            seen: Arc::default(),
        }
    }

    /// A view of what is seen while the poller runs.
    pub fn view(&self) -> GpuView {
        GpuView {
            seen: self.seen.clone(),
            failed: match (&self.thread, &self.failed) {
                (None, Some(failed)) => Some(failed.clone()),
                (None, None) => Some(unavailable("the GPU poller could not start".to_string())),
                (Some(_), _) => None,
            },
        }
    }

    /// Stop polling and return what was seen.
    pub fn finish(mut self) -> GpuRecording {
        self.stop.store(true, Ordering::Relaxed);
        match (self.thread.take(), self.failed.take()) {
            (Some(thread), _) => match thread.join() {
                Ok(()) => std::mem::take(&mut *lock(&self.seen)),
                Err(_) => unavailable("the GPU poller failed".to_string()),
            },
            (None, Some(failed)) => failed,
            (None, None) => unavailable("the GPU poller could not start".to_string()),
        }
    }
}

fn unavailable(reason: String) -> GpuRecording {
    GpuRecording {
        reason: Some(reason),
        ..GpuRecording::default()
    }
}

/// NVML from `lib`, else the default name, else the WSL driver directory.
fn load(lib: Option<&OsStr>) -> Result<Nvml, String> {
    let env = std::env::var_os("MLPROF_NVML_LIB").filter(|v| !v.is_empty());
    if let Some(path) = lib.map(OsStr::to_os_string).or(env) {
        return Nvml::builder()
            .lib_path(&path)
            .init()
            .map_err(|e| describe_init(&e, &path.to_string_lossy()));
    }
    match Nvml::init() {
        Ok(nvml) => Ok(nvml),
        Err(NvmlError::LibloadingError(_)) => {
            let wsl = OsStr::new("/usr/lib/wsl/lib/libnvidia-ml.so.1");
            Nvml::builder()
                .lib_path(wsl)
                .init()
                .map_err(|e| describe_init(&e, "libnvidia-ml.so.1"))
        }
        Err(e) => Err(describe_init(&e, "libnvidia-ml.so.1")),
    }
}

fn describe_init(e: &NvmlError, lib: &str) -> String {
    match e {
        NvmlError::LibloadingError(_) => format!("{lib} not found"),
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
        NvmlError::NoPermission => "no permission to use NVML".to_string(),
        other => format!("NVML error: {other}"),
    }
}

fn device_infos(nvml: &Nvml) -> Result<Vec<GpuDeviceInfo>, NvmlError> {
    let count = nvml.device_count()?;
    (0..count)
        .map(|index| {
            let device = nvml.device_by_index(index)?;
            Ok(GpuDeviceInfo {
                index,
                name: device.name().unwrap_or_else(|_| "NVIDIA GPU".to_string()),
                memory_total: device.memory_info().map_or(0, |m| m.total),
            })
        })
        .collect()
}

/// Polls in a row that may fail before polling stops for good.
const MAX_FAILED_POLLS: u32 = 3;

/// Most polls kept: when reached, neighbours are merged in pairs ([`halve`]), so a run of any
/// length keeps between half and all of this many (at 10 Hz, halving starts after 27 minutes).
pub const MAX_POLLS: usize = 16384;

/// Merge neighbouring polls in pairs: the first's time, utilisations averaged over the two,
/// memory the larger of the two (so peaks stay). A process seen in one poll of a pair only
/// keeps that poll's readings.
pub fn halve(polls: &mut Vec<GpuPoll>) {
    let merged: Vec<GpuPoll> = polls
        .chunks(2)
        .map(|pair| {
            let mut out = pair[0].clone();
            let Some(b) = pair.get(1) else { return out };
            for d in &mut out.devices {
                if let Some(other) = b.devices.iter().find(|o| o.index == d.index) {
                    d.util_pct = (d.util_pct + other.util_pct).div_ceil(2);
                    d.memory_used = d.memory_used.max(other.memory_used);
                }
            }
            for p in &b.processes {
                match out
                    .processes
                    .iter_mut()
                    .find(|o| o.device == p.device && o.pid == p.pid)
                {
                    Some(o) => {
                        o.memory_bytes = o.memory_bytes.max(p.memory_bytes);
                        o.sm_util_pct = match (o.sm_util_pct, p.sm_util_pct) {
                            (Some(x), Some(y)) => Some((x + y).div_ceil(2)),
                            (x, y) => x.or(y),
                        };
                    }
                    None => out.processes.push(*p),
                }
            }
            out
        })
        .collect();
    *polls = merged;
}
/// How long a process's last SM utilisation sample stands when the driver has no newer one,
/// before the driver's own sampling period is known (it samples every 1/6 s to 1 s).
const SAMPLE_HOLD_US: u64 = 1_000_000;

/// What the poller keeps between polls.
#[derive(Default)]
struct State {
    /// Per device slot: the newest process-utilisation timestamp seen (µs).
    last_seen: Vec<u64>,
    /// Per device slot: the shortest gap seen between two sample timestamps (µs).
    period_us: Vec<Option<u64>>,
    /// Per (device, pid): the last SM utilisation and its timestamp (µs).
    last_util: HashMap<(u32, u32), (u32, u64)>,
    /// NVML pid → our pid (`None`: not visible here).
    pids: HashMap<u32, Option<u32>>,
}

/// Poll until `stop`, adding each poll to `out` (locked only to add it: NVML is not called
/// under the lock). `rec` holds what `poll` reads and changes (devices, `process_util`).
fn poll_loop(
    nvml: Nvml,
    devices: Vec<GpuDeviceInfo>,
    period: Duration,
    launch_ns: u64,
    stop: &AtomicBool,
    out: &Mutex<GpuRecording>,
) {
    let mut rec = GpuRecording {
        available: true,
        process_util: true,
        devices,
        ..GpuRecording::default()
    };
    *lock(out) = rec.clone();
    let mut state = State {
        last_seen: vec![0; rec.devices.len()],
        period_us: vec![None; rec.devices.len()],
        ..State::default()
    };
    let mut failed = 0;
    while !stop.load(Ordering::Relaxed) {
        let t_ns = super::monotonic_ns().saturating_sub(launch_ns);
        match poll(&nvml, &mut rec, &mut state, t_ns) {
            Ok(poll) => {
                let mut seen = lock(out);
                seen.process_util = rec.process_util;
                seen.polls.push(poll);
                if seen.polls.len() >= MAX_POLLS {
                    halve(&mut seen.polls);
                }
                failed = 0;
            }
            Err(NvmlError::InsufficientSize(_)) => {} // a process came or went mid-poll
            Err(e) => {
                failed += 1;
                let fatal = matches!(e, NvmlError::GpuLost | NvmlError::Uninitialized);
                if fatal || failed >= MAX_FAILED_POLLS {
                    let mut seen = lock(out);
                    seen.process_util = rec.process_util;
                    seen.notes.push(format!(
                        "GPU polling stopped at {:.1} s: NVML error: {e}",
                        t_ns as f64 / 1e9
                    ));
                    break;
                }
            }
        }
        std::thread::sleep(period);
    }
    lock(out).process_util = rec.process_util;
}

/// A reading a device does not support (MIG instances have no utilisation) is missing, not
/// an error.
fn optional<T>(r: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Wall-clock microseconds, the clock of NVML's sample timestamps.
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn poll(
    nvml: &Nvml,
    rec: &mut GpuRecording,
    state: &mut State,
    t_ns: u64,
) -> Result<GpuPoll, NvmlError> {
    let mut out = GpuPoll {
        t_ns,
        ..GpuPoll::default()
    };
    let now = now_us();
    for (slot, info) in rec.devices.iter().enumerate() {
        let device = nvml.device_by_index(info.index)?;
        let util = optional(device.utilization_rates())?;
        let memory = optional(device.memory_info())?;
        out.devices.push(DeviceReading {
            index: info.index,
            util_pct: util.map_or(0, |u| u.gpu),
            memory_used: memory.map_or(0, |m| m.used),
        });
        let procs = match device.running_compute_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => device.running_compute_processes_v2()?,
            other => other?,
        };
        if rec.process_util {
            let mut fresh: HashMap<u32, (u32, u32, u64)> = HashMap::new(); // pid → (sum, n, ts)
            let before = state.last_seen[slot];
            match device.process_utilization_stats(before) {
                Ok(samples) => {
                    for s in samples {
                        state.last_seen[slot] = state.last_seen[slot].max(s.timestamp);
                        let e = fresh.entry(s.pid).or_default();
                        (e.0, e.1, e.2) = (e.0 + s.sm_util, e.1 + 1, e.2.max(s.timestamp));
                    }
                    let newest = state.last_seen[slot];
                    if before > 0 && newest > before {
                        let gap = newest - before;
                        let period = &mut state.period_us[slot];
                        *period = Some(period.map_or(gap, |p| p.min(gap)));
                    }
                    // The driver reports only processes that used the GPU: one it left out
                    // of a fresh sample was idle.
                    for (key, value) in state.last_util.iter_mut() {
                        if key.0 == info.index && !fresh.contains_key(&key.1) {
                            *value = (0, newest);
                        }
                    }
                }
                // No sample newer than the last one: the previous values stand (below).
                Err(NvmlError::NotFound) => {}
                Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => {
                    rec.process_util = false;
                }
                Err(e) => return Err(e),
            }
            for (pid, (sum, n, ts)) in fresh {
                state
                    .last_util
                    .insert((info.index, pid), (sum / n.max(1), ts));
            }
        }
        let hold = state.period_us[slot].map_or(SAMPLE_HOLD_US, |p| {
            (p + p / 2).clamp(100_000, SAMPLE_HOLD_US)
        });
        for p in procs {
            let seen = *state
                .pids
                .entry(p.pid)
                .or_insert_with(|| visible_pid(p.pid));
            // The newest sample of this process while it is recent (within one and a half of
            // the driver's sampling periods); none recent means it did not use the GPU.
            let sm_util_pct = rec.process_util.then(|| {
                state
                    .last_util
                    .get(&(info.index, p.pid))
                    .filter(|(_, ts)| now.saturating_sub(*ts) <= hold)
                    .map_or(0, |(u, _)| *u)
            });
            out.processes.push(GpuProcessReading {
                device: info.index,
                pid: seen.unwrap_or(p.pid),
                visible: seen.is_some(),
                memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => bytes,
                    UsedGpuMemory::Unavailable => 0,
                },
                sm_util_pct,
            });
        }
    }
    Ok(out)
}

/// The pid NVML reports, as our PID namespace sees it: itself when `/proc/PID` exists, else the
/// process whose `NSpid` list holds it (NVML reports pids of the namespace of the driver).
/// Looked up once per pid NVML reports; `None` when no process here has it.
fn visible_pid(pid: u32) -> Option<u32> {
    if std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Some(pid);
    }
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let Some(candidate) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let listed = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|ids| ids.split_whitespace().any(|id| id == pid.to_string()));
        if listed {
            return Some(candidate);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_week_of_polls_is_bounded_and_keeps_memory_peaks_and_mean_utilisation() {
        let mut polls = Vec::new();
        let week = 7 * 24 * 3600 * 10u64; // 10 Hz
        for i in 0..week {
            let busy = i % 2 == 0;
            polls.push(GpuPoll {
                t_ns: i * 100_000_000,
                devices: vec![DeviceReading {
                    index: 0,
                    util_pct: if busy { 100 } else { 0 },
                    memory_used: if i == week / 2 { 40 << 30 } else { 1 << 30 },
                }],
                processes: vec![GpuProcessReading {
                    device: 0,
                    pid: 42,
                    memory_bytes: if i == week / 2 { 39 << 30 } else { 1 << 29 },
                    sm_util_pct: Some(if busy { 80 } else { 20 }),
                    visible: true,
                }],
            });
            if polls.len() >= MAX_POLLS {
                halve(&mut polls);
            }
        }
        assert!(polls.len() < MAX_POLLS && polls.len() >= MAX_POLLS / 2);
        assert!(polls.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
        let max_used = polls.iter().map(|p| p.devices[0].memory_used).max();
        assert_eq!(max_used, Some(40 << 30));
        let max_proc = polls.iter().map(|p| p.processes[0].memory_bytes).max();
        assert_eq!(max_proc, Some(39 << 30));
        let mean = polls
            .iter()
            .map(|p| p.devices[0].util_pct as f64)
            .sum::<f64>()
            / polls.len() as f64;
        assert!((mean - 50.0).abs() < 1.0, "mean utilisation {mean}");
        let sm = polls
            .iter()
            .filter_map(|p| p.processes[0].sm_util_pct)
            .sum::<u32>() as f64
            / polls.len() as f64;
        assert!((sm - 50.0).abs() < 1.0, "mean SM utilisation {sm}");
    }
}
