//! CUDA runtime calls → per-line GPU figures (exact): device memory each line reserved, how
//! much of it was still held when its process's device memory peaked (each device at its own
//! peak, found by replaying the allocations and frees in order), pinned host memory, copies by
//! direction and kernel launches; and each process's totals. The time threads waited for the
//! GPU comes with the CPU samples (`cpu`). Pure.

use std::collections::{BTreeMap, HashMap};

use mlprof_wire::{gpu_copy, gpu_space, sample_flags};

use super::filter::Filter;
use super::places::{place_of, Acc, Lines, Place};
use super::profile::{GpuCallPeak, GpuLineCalls, NvmlSplit, ProcessGpuCalls};
use crate::recording::{GpuAllocEvent, GpuCalls, Recording};

/// Add every channel's CUDA calls to `places`; returns each pid's totals.
pub fn add(
    rec: &Recording,
    filter: &Filter,
    places: &mut HashMap<Place, Acc>,
) -> BTreeMap<u32, ProcessGpuCalls> {
    let mut out: BTreeMap<u32, ProcessGpuCalls> = BTreeMap::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        let calls = &channel.gpu_calls;
        let waited: u64 = channel
            .samples
            .iter()
            .filter(|s| s.flags & sample_flags::GPU_WAIT != 0)
            .map(|s| s.weight_ns)
            .sum();
        if calls.is_empty() && waited == 0 {
            // No call seen: NVML's memory of it, if any, is all "not seen".
            if let Some(split) = nvml_split(rec, channel.pid, calls) {
                out.entry(channel.pid).or_default().nvml = Some(split);
            }
            continue;
        }
        let mut sum = GpuLineCalls {
            gpu_wait_s: waited as f64 / 1e9,
            ..GpuLineCalls::default()
        };
        let mut lines = Lines::new(rec, ci);
        // Each figure goes to its line and to the process's sum.
        let mut add = |frames: &[(u32, i32)], tid: u32, figures: GpuLineCalls| {
            let place = place_of(frames, tid, channel.pid, &mut lines, filter);
            places.entry(place).or_default().gpu_calls.add(&figures);
            sum.add(&figures);
        };
        let peaks = device_peaks(calls);
        for a in &calls.allocs {
            let figures = if a.space == gpu_space::PINNED {
                GpuLineCalls {
                    gpu_pinned_bytes: a.size,
                    ..GpuLineCalls::default()
                }
            } else {
                let peak = peaks.iter().find(|p| p.device == a.device);
                let held = peak.is_some_and(|p| held_at(a, p.at_ns));
                GpuLineCalls {
                    gpu_reserved_bytes: a.size,
                    gpu_reserved_calls: 1,
                    gpu_freed_bytes: if a.freed_ns.is_some() { a.size } else { 0 },
                    gpu_peak_bytes: if held { a.size } else { 0 },
                    ..GpuLineCalls::default()
                }
            };
            add(&a.frames, a.tid, figures);
        }
        for c in &calls.copies {
            let mut figures = GpuLineCalls::default();
            match c.direction {
                gpu_copy::HOST_TO_DEVICE => figures.gpu_h2d_bytes = c.bytes,
                gpu_copy::DEVICE_TO_HOST => figures.gpu_d2h_bytes = c.bytes,
                gpu_copy::DEVICE_TO_DEVICE => figures.gpu_d2d_bytes = c.bytes,
                _ => {} // host to host, or not known: not a transfer over the bus
            }
            add(&c.frames, c.tid, figures);
        }
        for l in &calls.launches {
            let figures = GpuLineCalls {
                gpu_launches: l.launches,
                ..GpuLineCalls::default()
            };
            add(&l.frames, l.tid, figures);
        }
        let totals = out.entry(channel.pid).or_default();
        totals.totals.add(&sum);
        totals.nvml = nvml_split(rec, channel.pid, calls).or(totals.nvml.take());
        totals.unmatched_frees += calls.unmatched_frees;
        totals.pinned_peak_bytes = totals.pinned_peak_bytes.max(pinned_peak(calls));
        for p in peaks {
            let end_bytes = calls
                .allocs
                .iter()
                .filter(|a| a.space != gpu_space::PINNED && a.device == p.device)
                .filter(|a| a.freed_ns.is_none())
                .map(|a| a.size)
                .sum();
            totals.devices.push(GpuCallPeak {
                device: p.device,
                peak_bytes: p.bytes,
                at_s: p.at_ns as f64 / 1e9,
                end_bytes,
            });
        }
    }
    out
}

/// NVML's highest reading of process `pid` (the last one, when several equal it), split
/// into the bytes its CUDA calls held at that moment and the rest.
fn nvml_split(rec: &Recording, pid: u32, calls: &GpuCalls) -> Option<NvmlSplit> {
    let (t_ns, peak_bytes) = rec
        .gpu
        .polls
        .iter()
        .map(|poll| {
            let rows = poll.processes.iter().filter(|r| r.pid == pid);
            (poll.t_ns, rows.map(|r| r.memory_bytes).sum::<u64>())
        })
        .filter(|&(_, bytes)| bytes > 0)
        .max_by_key(|&(t, bytes)| (bytes, t))?;
    let held: u64 = calls
        .allocs
        .iter()
        .filter(|a| a.space != gpu_space::PINNED && held_at(a, t_ns))
        .map(|a| a.size)
        .sum();
    Some(NvmlSplit {
        peak_bytes,
        at_s: t_ns as f64 / 1e9,
        through_calls_bytes: held.min(peak_bytes),
        not_seen_bytes: peak_bytes.saturating_sub(held),
    })
}

/// Whether allocation `a` was held at `t_ns`.
fn held_at(a: &GpuAllocEvent, t_ns: u64) -> bool {
    a.t_ns <= t_ns && a.freed_ns.is_none_or(|f| f > t_ns)
}

/// One device's peak.
struct Peak {
    device: Option<u32>,
    bytes: u64,
    at_ns: u64,
}

/// Each device's highest bytes held at once and when it was first reached: allocations and
/// frees replayed in time order (a free at the same instant as an allocation first).
fn device_peaks(calls: &GpuCalls) -> Vec<Peak> {
    let mut by_device: BTreeMap<Option<u32>, Vec<(u64, i128)>> = BTreeMap::new();
    for a in calls.allocs.iter().filter(|a| a.space != gpu_space::PINNED) {
        let steps = by_device.entry(a.device).or_default();
        steps.push((a.t_ns, i128::from(a.size)));
        if let Some(f) = a.freed_ns {
            steps.push((f, -i128::from(a.size)));
        }
    }
    by_device
        .into_iter()
        .map(|(device, steps)| {
            let (bytes, at_ns) = highest(steps);
            Peak {
                device,
                bytes,
                at_ns,
            }
        })
        .collect()
}

/// Highest page-locked bytes held at once.
fn pinned_peak(calls: &GpuCalls) -> u64 {
    let mut steps = Vec::new();
    for a in calls.allocs.iter().filter(|a| a.space == gpu_space::PINNED) {
        steps.push((a.t_ns, i128::from(a.size)));
        if let Some(f) = a.freed_ns {
            steps.push((f, -i128::from(a.size)));
        }
    }
    highest(steps).0
}

/// The highest running sum of `steps` (time, change) and the first time it is reached.
fn highest(mut steps: Vec<(u64, i128)>) -> (u64, u64) {
    steps.sort_by_key(|&(t, change)| (t, change));
    let (mut now, mut best, mut at) = (0i128, 0i128, 0u64);
    for (t, change) in steps {
        now += change;
        if now > best {
            (best, at) = (now, t);
        }
    }
    (u64::try_from(best).unwrap_or(0), at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(t_ns: u64, size: u64, device: u32, freed_ns: Option<u64>) -> GpuAllocEvent {
        GpuAllocEvent {
            t_ns,
            size,
            device: Some(device),
            freed_ns,
            ..GpuAllocEvent::default()
        }
    }

    #[test]
    fn each_device_peaks_on_its_own_and_a_free_at_the_same_instant_comes_first() {
        let calls = GpuCalls {
            allocs: vec![
                alloc(1, 100, 0, None),
                alloc(2, 50, 0, Some(3)),
                alloc(3, 60, 0, Some(9)), // replaces the 50 at the same instant: peak 160 at 3
                alloc(4, 500, 1, Some(5)),
                alloc(6, 300, 1, None),
            ],
            ..GpuCalls::default()
        };
        let peaks = device_peaks(&calls);
        let got: Vec<_> = peaks.iter().map(|p| (p.device, p.bytes, p.at_ns)).collect();
        assert_eq!(got, vec![(Some(0), 160, 3), (Some(1), 500, 4)]);
        assert!(held_at(&calls.allocs[2], 3) && !held_at(&calls.allocs[1], 3));
    }
}
