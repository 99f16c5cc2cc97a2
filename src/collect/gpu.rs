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
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

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

/// What the poller saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuRecording {
    /// Whether NVML could be used at all.
    pub available: bool,
    /// Why not (the one line the report shows).
    pub reason: Option<String>,
    /// The devices.
    pub devices: Vec<GpuDeviceInfo>,
    /// One entry per poll, in time order.
    pub polls: Vec<GpuPoll>,
    /// Whether per-process SM utilisation could be read (`nvmlDeviceGetProcessUtilization`).
    pub process_util: bool,
    /// What went wrong during the run (polling stops at the first failure).
    pub notes: Vec<String>,
}

/// A device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuDeviceInfo {
    /// NVML index.
    pub index: u32,
    /// Name.
    pub name: String,
    /// Total memory in bytes.
    pub memory_total: u64,
}

/// One poll of every device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuPoll {
    /// Nanoseconds from launch.
    pub t_ns: u64,
    /// Device-wide readings.
    pub devices: Vec<DeviceReading>,
    /// Processes with a GPU context, on any device.
    pub processes: Vec<GpuProcessReading>,
}

/// Device-wide readings of one poll.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceReading {
    /// Device index.
    pub index: u32,
    /// Percent of the last sample period a kernel ran.
    pub util_pct: u32,
    /// Device memory in use (bytes).
    pub memory_used: u64,
}

/// One process on one device at one poll.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuProcessReading {
    /// Device index.
    pub device: u32,
    /// The pid as seen from our PID namespace (translated through `NSpid` when needed).
    pub pid: u32,
    /// GPU memory it uses (bytes; 0 when the driver does not say).
    pub memory_bytes: u64,
    /// SM utilisation since the previous poll (percent), when per-process samples exist.
    pub sm_util_pct: Option<u32>,
    /// Whether the pid could be found in our PID namespace.
    pub visible: bool,
}

/// A running poller.
pub struct GpuPoller {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<GpuRecording>>,
    failed: Option<GpuRecording>,
}

impl GpuPoller {
    /// Load NVML and start polling; `launch_ns` is the launch time on the monotonic clock.
    pub fn start(options: &GpuOptions, launch_ns: u64) -> GpuPoller {
        let stop = Arc::new(AtomicBool::new(false));
        if !options.enabled {
            return GpuPoller::failed("turned off (--no-gpu)".to_string(), stop);
        }
        let nvml = match load(options.lib.as_deref().map(|p| p.as_os_str())) {
            Ok(nvml) => nvml,
            Err(reason) => return GpuPoller::failed(reason, stop),
        };
        let devices = match device_infos(&nvml) {
            Ok(d) if !d.is_empty() => d,
            Ok(_) => return GpuPoller::failed("no NVIDIA GPU found".to_string(), stop),
            Err(e) => return GpuPoller::failed(format!("NVML error: {e}"), stop),
        };
        let period = Duration::from_secs_f64(1.0 / options.rate_hz.clamp(1.0, 100.0));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mlprof-gpu".to_string())
            .spawn(move || poll_loop(nvml, devices, period, launch_ns, &flag))
            .ok();
        GpuPoller {
            stop,
            thread,
            failed: None,
        }
    }

    fn failed(reason: String, stop: Arc<AtomicBool>) -> GpuPoller {
        GpuPoller {
            stop,
            thread: None,
            failed: Some(GpuRecording {
                reason: Some(reason),
                ..GpuRecording::default()
            }),
        }
    }

    /// Stop polling and return what was seen.
    pub fn finish(mut self) -> GpuRecording {
        self.stop.store(true, Ordering::Relaxed);
        match (self.thread.take(), self.failed.take()) {
            (Some(thread), _) => thread.join().unwrap_or_else(|_| GpuRecording {
                reason: Some("the GPU poller failed".to_string()),
                ..GpuRecording::default()
            }),
            (None, Some(failed)) => failed,
            (None, None) => GpuRecording {
                reason: Some("the GPU poller could not start".to_string()),
                ..GpuRecording::default()
            },
        }
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

fn poll_loop(
    nvml: Nvml,
    devices: Vec<GpuDeviceInfo>,
    period: Duration,
    launch_ns: u64,
    stop: &AtomicBool,
) -> GpuRecording {
    let mut rec = GpuRecording {
        available: true,
        process_util: true,
        devices,
        ..GpuRecording::default()
    };
    let mut last_seen = vec![0u64; rec.devices.len()];
    let mut pids: HashMap<u32, Option<u32>> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let t_ns = super::monotonic_ns().saturating_sub(launch_ns);
        match poll(&nvml, &mut rec, &mut last_seen, &mut pids, t_ns) {
            Ok(poll) => rec.polls.push(poll),
            Err(e) => {
                rec.notes.push(format!(
                    "GPU polling stopped at {:.1} s: NVML error: {e}",
                    t_ns as f64 / 1e9
                ));
                break;
            }
        }
        std::thread::sleep(period);
    }
    rec
}

fn poll(
    nvml: &Nvml,
    rec: &mut GpuRecording,
    last_seen: &mut [u64],
    pids: &mut HashMap<u32, Option<u32>>,
    t_ns: u64,
) -> Result<GpuPoll, NvmlError> {
    let mut out = GpuPoll {
        t_ns,
        ..GpuPoll::default()
    };
    for (slot, info) in rec.devices.iter().enumerate() {
        let device = nvml.device_by_index(info.index)?;
        let util = device.utilization_rates()?;
        let memory = device.memory_info()?;
        out.devices.push(DeviceReading {
            index: info.index,
            util_pct: util.gpu,
            memory_used: memory.used,
        });
        let procs = match device.running_compute_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => device.running_compute_processes_v2()?,
            other => other?,
        };
        let mut sm: Vec<(u32, u32, u32)> = Vec::new(); // (pid, sum, count)
        if rec.process_util {
            match device.process_utilization_stats(last_seen[slot]) {
                Ok(samples) => {
                    for s in samples {
                        last_seen[slot] = last_seen[slot].max(s.timestamp);
                        match sm.iter_mut().find(|e| e.0 == s.pid) {
                            Some(e) => (e.1, e.2) = (e.1 + s.sm_util, e.2 + 1),
                            None => sm.push((s.pid, s.sm_util, 1)),
                        }
                    }
                }
                Err(NvmlError::NotFound) => {} // no process used the GPU since the last poll
                Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => {
                    rec.process_util = false;
                }
                Err(e) => return Err(e),
            }
        }
        for p in procs {
            let seen = *pids.entry(p.pid).or_insert_with(|| visible_pid(p.pid));
            let sm_util_pct = rec.process_util.then(|| {
                sm.iter()
                    .find(|e| e.0 == p.pid)
                    .map_or(0, |e| e.1 / e.2.max(1))
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
