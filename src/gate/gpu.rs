//! The budget on device memory reserved through CUDA calls (`max-gpu-reserved`): exceeded when
//! one process held more than the limit on one device (a job's ranks each have their own card:
//! what must fit is each process's share of each device), naming the lines that held most at
//! that peak. A run in which no CUDA call was seen fails it too: a budget that cannot be
//! checked must not pass silently.

use super::{place, violation};
use crate::model::{Budget, Profile, Violation};
use crate::units::bytes;

/// The `max-gpu-reserved` verdict, if the budget is exceeded or cannot be checked.
pub fn reserved_verdict(p: &Profile, limit: u64) -> Option<Violation> {
    let peaks = p.processes.iter().flat_map(|process| {
        let devices = process.gpu_calls.iter().flat_map(|c| &c.devices);
        devices.map(move |d| (process.pid, d.device, d.peak_bytes))
    });
    let Some((pid, device, peak)) = peaks.max_by_key(|&(_, _, peak)| peak) else {
        let mut v = violation(Budget::GpuReserved, "GPU memory reserved", limit, 0, "");
        v.message =
            "budget not checked: GPU memory reserved (no CUDA runtime call was seen)".into();
        return Some(v);
    };
    if peak <= limit {
        return None;
    }
    let mut top: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.measures.gpu_calls.gpu_peak_bytes > 0 && l.line > 0)
        .collect();
    top.sort_by_key(|l| std::cmp::Reverse(l.measures.gpu_calls.gpu_peak_bytes));
    let held: Vec<String> = top
        .iter()
        .take(3)
        .map(|l| {
            let b = bytes(l.measures.gpu_calls.gpu_peak_bytes);
            format!("{} held {b}", place(&l.file, l.line))
        })
        .collect();
    let device = device.map_or("an unknown device".to_string(), |d| format!("device {d}"));
    let what = format!("GPU memory reserved by pid {pid} on {device}");
    let mut v = violation(Budget::GpuReserved, &what, limit, peak, &held.join(", "));
    if let Some(l) = top.first() {
        v.file = Some(l.file.clone());
        v.line = Some(l.line);
    }
    Some(v)
}

/// The `max-gpu-allocated` verdict: one process's tensors at its allocator's peak on one
/// device above `limit`, naming the lines holding most then; not checked (no allocator was
/// traced) is a failure too.
pub fn allocated_verdict(p: &Profile, limit: u64) -> Option<Violation> {
    let peaks = p.processes.iter().flat_map(|process| {
        let devices = process.gpu_tensors.iter().flat_map(|t| &t.devices);
        devices.map(move |d| (process.pid, d))
    });
    let Some((pid, d)) = peaks.max_by_key(|(_, d)| d.peak_allocated_bytes) else {
        let mut v = violation(Budget::GpuAllocated, "GPU tensors allocated", limit, 0, "");
        v.message = "budget not checked: GPU tensors allocated (no PyTorch CUDA allocator was \
                     traced: no PyTorch on CUDA, its trace unread, or --no-gpu-tensors)"
            .into();
        return Some(v);
    };
    if d.peak_allocated_bytes <= limit {
        return None;
    }
    let held: Vec<String> = d
        .top
        .iter()
        .take(3)
        .map(|l| format!("{} held {}", place(&l.file, l.line), bytes(l.bytes)))
        .collect();
    let what = format!("GPU tensors allocated by pid {pid} on device {}", d.device);
    let mut v = violation(
        Budget::GpuAllocated,
        &what,
        limit,
        d.peak_allocated_bytes,
        &held.join(", "),
    );
    if let Some(l) = d.top.first() {
        v.file = Some(l.file.clone());
        v.line = Some(l.line);
    }
    Some(v)
}

/// A budget file's `[gpu-lines]`: each line's tensors at its process's GPU peak.
pub fn line_verdicts(p: &Profile, b: &super::Budgets) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, &limit) in &b.gpu_lines {
        let Some((file, line)) = super::line_key(key) else {
            continue;
        };
        let of = |l: &&crate::model::LineStats| l.line == line && super::same_file(&l.file, file);
        let held: u64 = p
            .lines
            .iter()
            .filter(of)
            .map(|l| l.measures.gpu_tensor_peak_bytes)
            .sum();
        if held > limit {
            let mut v = violation(
                Budget::GpuLine,
                &format!("{key} held on the GPU"),
                limit,
                held,
                "",
            );
            if let Some(l) = p.lines.iter().find(of) {
                v.file = Some(l.file.clone());
                v.line = Some(l.line);
            }
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::{GpuCallPeak, GpuLineCalls, ProcessGpuCalls};
    use crate::model::{LineStats, Process};

    fn profile(peaks: &[u64]) -> Profile {
        let mut p = Profile::default();
        let devices = peaks
            .iter()
            .enumerate()
            .map(|(i, &peak_bytes)| GpuCallPeak {
                device: Some(i as u32),
                peak_bytes,
                ..GpuCallPeak::default()
            })
            .collect();
        p.processes.push(Process {
            pid: 7,
            gpu_calls: Some(ProcessGpuCalls {
                devices,
                ..ProcessGpuCalls::default()
            }),
            ..Process::default()
        });
        let mut line = LineStats {
            file: "/job/train.py".into(),
            line: 42,
            ..LineStats::default()
        };
        line.measures.gpu_calls = GpuLineCalls {
            gpu_peak_bytes: 3 << 30,
            ..GpuLineCalls::default()
        };
        p.lines.push(line);
        p
    }

    #[test]
    fn the_fullest_device_of_one_process_is_judged_and_its_holders_named() {
        let gib = 1u64 << 30;
        assert!(reserved_verdict(&profile(&[3 * gib, 2 * gib]), 3 * gib).is_none());
        let v = reserved_verdict(&profile(&[2 * gib, 5 * gib]), 4 * gib).unwrap();
        assert_eq!(v.budget, Budget::GpuReserved);
        assert!(v.message.contains("pid 7 on device 1"), "{}", v.message);
        assert!(
            v.message.contains("train.py:42 held 3.0 GiB"),
            "{}",
            v.message
        );
        assert_eq!(
            (v.file.as_deref(), v.line),
            (Some("/job/train.py"), Some(42))
        );
        // No call seen: not checked is a failure, not a pass.
        let v = reserved_verdict(&Profile::default(), gib).unwrap();
        assert!(v.message.starts_with("budget not checked"), "{}", v.message);
    }
}
