//! CUDA runtime calls → per-line GPU figures (exact): device memory each line reserved, how
//! much of it was still held when its process's device memory peaked (each device at its own
//! peak, found by replaying the allocations and frees in order: `gpu_held`), pinned host
//! memory, copies by direction and kernel launches; and each process's totals, device peaks
//! and timelines. The time threads waited for the GPU comes with the CPU samples (`cpu`). Calls
//! a thread without Python makes (PyTorch's autograd engine runs a CUDA backward on a device
//! thread of its own) go to the line the process's Python threads were on then, as that
//! thread's CPU does (`pooljoin`). Pure.

use std::collections::{BTreeMap, HashMap};

use mlprof_wire::{gpu_copy, gpu_space, sample_flags};

use super::filter::Filter;
use super::gpu_held::{self, held_at};
use super::gpu_kernels;
use super::places::{place_of, Acc, Lines, Place, NATIVE_THREAD};
use super::pooljoin::PoolJoin;
use super::profile::{GpuCallPeak, GpuHeldSample, GpuLineCalls, NvmlSplit, ProcessGpuCalls};
use crate::recording::{GpuCalls, Recording};

/// Add every channel's CUDA calls to `places`; returns each pid's totals. `sample_places`:
/// where each CPU sample went by its own frames (`cpu::places`), for the pool join.
pub fn add(
    rec: &Recording,
    filter: &Filter,
    sample_places: &[Vec<Place>],
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
        let join = PoolJoin::new(&channel.samples, &sample_places[ci]);
        // Each figure goes to its line and to the process's sum; a row of a thread without
        // Python to the line its process's Python threads were on at its first call.
        let mut add = |frames: &[(u32, i32)], tid: u32, t_ns: u64, figures: GpuLineCalls, named| {
            let mut place = place_of(frames, tid, channel.pid, &mut lines, filter);
            if place.file == NATIVE_THREAD {
                if let Some(j) = join.at(t_ns) {
                    place = sample_places[ci][j].clone();
                }
            }
            let acc = places.entry(place).or_default();
            acc.gpu_calls.add(&figures);
            if let Some((name, shares)) = named {
                gpu_kernels::merge(&mut acc.kernels, HashMap::from([(name, shares)]));
            }
            sum.add(&figures);
        };
        let devices = gpu_held::devices(calls);
        let peaks: Vec<(Option<u32>, u64)> =
            devices.iter().map(|h| (h.device, h.peak().1)).collect();
        for a in &calls.allocs {
            let figures = if a.space == gpu_space::PINNED {
                GpuLineCalls {
                    gpu_pinned_bytes: a.size,
                    gpu_pinned_calls: 1,
                    gpu_pinned_end_bytes: if a.freed_ns.is_none() { a.size } else { 0 },
                    ..GpuLineCalls::default()
                }
            } else {
                let peak = peaks.iter().find(|p| p.0 == a.device);
                let held = peak.is_some_and(|p| held_at(a, p.1));
                GpuLineCalls {
                    gpu_reserved_bytes: a.size,
                    gpu_reserved_calls: 1,
                    gpu_freed_bytes: if a.freed_ns.is_some() { a.size } else { 0 },
                    gpu_peak_bytes: if held { a.size } else { 0 },
                    ..GpuLineCalls::default()
                }
            };
            add(&a.frames, a.tid, a.t_ns, figures, None);
        }
        for c in &calls.copies {
            let mut figures = GpuLineCalls::default();
            match c.direction {
                gpu_copy::HOST_TO_DEVICE => figures.gpu_h2d_bytes = c.bytes,
                gpu_copy::DEVICE_TO_HOST => figures.gpu_d2h_bytes = c.bytes,
                gpu_copy::DEVICE_TO_DEVICE => figures.gpu_d2d_bytes = c.bytes,
                _ => {} // host to host, or not known: not a transfer over the bus
            }
            add(&c.frames, c.tid, c.first_ns, figures, None);
        }
        for l in &calls.launches {
            let figures = GpuLineCalls {
                gpu_launches: l.launches,
                ..GpuLineCalls::default()
            };
            add(&l.frames, l.tid, l.first_ns, figures, None);
        }
        for (frames, tid, first_ns, figures, named) in gpu_kernels::rows(&calls.kernels) {
            add(frames, tid, first_ns, figures, Some(named));
        }
        let totals = out.entry(channel.pid).or_default();
        totals.totals.add(&sum);
        totals.nvml = nvml_split(rec, channel.pid, calls).or(totals.nvml.take());
        totals.unmatched_frees += calls.unmatched_frees;
        if let Some(k) = gpu_kernels::process(&calls.kernels) {
            match &mut totals.kernels {
                Some(earlier) => gpu_kernels::merge_process(earlier, k),
                None => totals.kernels = Some(k),
            }
        }
        let pinned_peak = gpu_held::pinned(calls).peak().0;
        totals.pinned_peak_bytes = totals.pinned_peak_bytes.max(pinned_peak);
        totals.devices.extend(devices.iter().map(device));
    }
    out
}

/// A device's peak, end and timeline.
fn device(held: &gpu_held::Held) -> GpuCallPeak {
    let (peak_bytes, at_ns) = held.peak();
    let timeline = super::timeline::highs(&held.points, super::timeline::GPU_POINTS);
    GpuCallPeak {
        device: held.device,
        peak_bytes,
        at_s: at_ns as f64 / 1e9,
        end_bytes: held.end(),
        timeline: timeline
            .into_iter()
            .map(|(t_ns, bytes)| GpuHeldSample {
                t_s: t_ns as f64 / 1e9,
                bytes,
            })
            .collect(),
    }
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
