//! Reading back the traces of PyTorch's CUDA allocator that mlprof's start-up hook wrote into
//! the run's directory (`gpu-tensors-PID.json`, one per process; docs/design/gpu-tensors.md).
//! What a profiled process wrote is untrusted: regular files only, never followed through a
//! link, bounded in size, every index checked; a file that does not read is one warning.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::Deserialize;

use crate::recording::gpu_tensors::{Action, DeviceTrace, TensorTrace, TraceEvent, TraceState};

/// The largest trace file read (50,000 events with their stacks take a few MB; parsed, a file
/// takes several times its size).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// Every process's trace in `dir`, by pid, and a warning for each file that would not read;
/// event times from launch (`launch_ns` on `CLOCK_MONOTONIC`).
pub fn read(dir: &Path, launch_ns: u64) -> (Vec<TensorTrace>, Vec<String>) {
    let mut traces = Vec::new();
    let mut warnings = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (traces, warnings);
    };
    let mut files: Vec<(u32, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid = name.strip_prefix("gpu-tensors-")?.strip_suffix(".json")?;
            // The canonical form only: `+7` and `007` are not a second file of process 7.
            let parsed: u32 = pid.parse().ok()?;
            (parsed.to_string() == pid).then(|| (parsed, e.path()))
        })
        .collect();
    files.sort();
    for (pid, path) in files {
        match read_one(&path, pid, launch_ns) {
            Ok(trace) => traces.push(trace),
            Err(why) => warnings.push(format!(
                "the trace of PyTorch's CUDA allocator in process {pid} could not be read \
                 ({why}): its GPU memory is shown by its CUDA calls' segments only"
            )),
        }
    }
    (traces, warnings)
}

#[derive(Deserialize)]
struct File {
    pid: u32,
    state: String,
    #[serde(default)]
    why: String,
    #[serde(default)]
    torch: String,
    #[serde(default)]
    entries: u64,
    #[serde(default)]
    frames: Vec<(String, i64, String)>,
    #[serde(default)]
    stacks: Vec<Vec<u32>>,
    #[serde(default)]
    devices: Vec<Device>,
    /// (Unix ns, CLOCK_MONOTONIC ns) read together at the dump.
    #[serde(default)]
    clock: Option<(u64, u64)>,
}

#[derive(Deserialize)]
struct Device {
    device: u32,
    #[serde(default)]
    events: Vec<(u8, u64, u64, i64, u64)>,
    #[serde(default)]
    live: Vec<(u64, u64, i64)>,
    #[serde(default)]
    reserved: u64,
    #[serde(default)]
    max_allocated: Option<i64>,
    #[serde(default)]
    max_requested: Option<i64>,
    /// Entries the ring held (every action, also those not written).
    #[serde(default)]
    ring: Option<u64>,
}

fn read_one(path: &Path, pid: u32, launch_ns: u64) -> Result<TensorTrace, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("{} bytes, more than a trace holds", meta.len()));
    }
    let mut text = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_FILE_BYTES)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    let raw: File = serde_json::from_slice(&text).map_err(|e| format!("not a trace: {e}"))?;
    if raw.pid != pid {
        return Err(format!("it names process {}", raw.pid));
    }
    Ok(convert(raw, launch_ns))
}

fn convert(raw: File, launch_ns: u64) -> TensorTrace {
    // A Unix-microsecond stamp → ns from launch: (unix − unix_then) + monotonic_then − launch.
    let clock = raw.clock;
    let from_launch = move |time_us: u64| -> Option<u64> {
        let (unix, mono) = clock?;
        let unix_at = i128::from(time_us.checked_mul(1000)?);
        let t = unix_at - i128::from(unix) + i128::from(mono) - i128::from(launch_ns);
        (time_us > 0 && t >= 0)
            .then(|| u64::try_from(t).ok())
            .flatten()
    };
    let state = match raw.state.as_str() {
        "done" => TraceState::Done,
        "recording" => TraceState::Recording,
        _ if raw.why.is_empty() => TraceState::Failed(format!("state {:?}", raw.state)),
        _ => TraceState::Failed(raw.why),
    };
    let stacks = raw.stacks.len();
    let stack = |s: i64| u32::try_from(s).ok().filter(|&s| (s as usize) < stacks);
    let devices = raw
        .devices
        .into_iter()
        .map(|d| DeviceTrace {
            device: d.device,
            events: d
                .events
                .into_iter()
                .filter_map(|(code, addr, size, s, time_us)| {
                    let action = match code {
                        0 => Action::Alloc,
                        1 => Action::Free,
                        2 => Action::SegmentAlloc,
                        3 => Action::SegmentFree,
                        4 => Action::Oom,
                        _ => return None,
                    };
                    Some(TraceEvent {
                        action,
                        addr,
                        size,
                        stack: stack(s),
                        t_ns: from_launch(time_us),
                    })
                })
                .collect(),
            live: d
                .live
                .into_iter()
                .map(|(addr, size, s)| (addr, size, stack(s)))
                .collect(),
            reserved: d.reserved,
            max_allocated: d.max_allocated.and_then(|m| u64::try_from(m).ok()),
            max_requested: d.max_requested.and_then(|m| u64::try_from(m).ok()),
            ring: d.ring.unwrap_or(0),
        })
        .collect();
    TensorTrace {
        pid: raw.pid,
        state,
        torch: raw.torch,
        entries: raw.entries,
        frames: raw
            .frames
            .into_iter()
            .map(|(file, line, name)| (file, u32::try_from(line).unwrap_or(0), name))
            .collect(),
        stacks: raw.stacks,
        devices,
        region: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn traces_are_read_by_pid_and_bad_ones_are_one_warning_each() {
        let dir = std::env::temp_dir().join(format!("mlprof-tensors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write(
            &dir,
            "gpu-tensors-7.json",
            r#"{"version":1,"pid":7,"state":"done","torch":"2.5","entries":10,
               "frames":[["/a.py",3,"f"]],"stacks":[[0,9]],
               "devices":[{"device":0,"events":[[0,4096,512,0,1],[1,4096,512,-1,2],[9,0,0,0,0],[0,8192,1,5,3]],
                           "live":[[8192,1,0]],"reserved":2097152,"max_allocated":512}]}"#,
        );
        write(&dir, "gpu-tensors-8.json", r#"{"pid":9,"state":"done"}"#);
        write(&dir, "gpu-tensors-10.json", "[");
        write(&dir, "gpu-tensors-x.json", "ignored");
        write(
            &dir,
            "gpu-tensors-007.json",
            "ignored: not the canonical form of 7",
        );
        std::os::unix::fs::symlink(
            dir.join("gpu-tensors-7.json"),
            dir.join("gpu-tensors-11.json"),
        )
        .unwrap();
        let (traces, warnings) = read(&dir, 0);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(traces.len(), 1, "{warnings:?}");
        let t = &traces[0];
        assert_eq!((t.pid, &t.state, t.entries), (7, &TraceState::Done, 10));
        let d = &t.devices[0];
        // The unknown action is left out, an index beyond the stacks is no stack.
        assert_eq!(d.events.len(), 3);
        assert_eq!(d.events[0].stack, Some(0));
        assert_eq!(d.events[1].action, Action::Free);
        assert_eq!(d.events[2].stack, None);
        assert_eq!(d.max_allocated, Some(512));
        // Frame 9 does not exist: left out.
        assert_eq!(t.frames_of(0).count(), 1);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        for w in &warnings {
            assert!(w.contains("segments only"), "{w}");
        }
    }
}
