//! What a process held through its CUDA calls over time: its allocations and frees replayed in
//! time order, per device (device and managed memory) and for pinned host memory. A free at the
//! same instant as an allocation counts first, so that a block given back and another taken
//! in its place never add up. Pure.

use std::collections::BTreeMap;

use mlprof_wire::gpu_space;

use crate::recording::{GpuAllocEvent, GpuCalls};

/// Bytes held through the calls of one device (or of pinned host memory), over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Held {
    /// The device (`None`: not known, or pinned host memory).
    pub device: Option<u32>,
    /// (ns from launch, bytes held once every call of that instant was made), one point per
    /// instant with a call, in time order.
    pub points: Vec<(u64, u64)>,
}

impl Held {
    /// The most held at once and the first instant it was held (0 and 0 without calls).
    pub fn peak(&self) -> (u64, u64) {
        let mut best = (0, 0);
        for &(t, bytes) in &self.points {
            if bytes > best.0 {
                best = (bytes, t);
            }
        }
        best
    }

    /// What was held after the last call (never given back).
    pub fn end(&self) -> u64 {
        self.points.last().map_or(0, |p| p.1)
    }
}

/// Each device's bytes held over time (device and managed allocations), by device.
pub fn devices(calls: &GpuCalls) -> Vec<Held> {
    let mut by_device: BTreeMap<Option<u32>, Vec<&GpuAllocEvent>> = BTreeMap::new();
    for a in calls.allocs.iter().filter(|a| a.space != gpu_space::PINNED) {
        by_device.entry(a.device).or_default().push(a);
    }
    by_device
        .into_iter()
        .map(|(device, allocs)| Held {
            device,
            points: replay(allocs),
        })
        .collect()
}

/// Pinned host memory held over time.
pub fn pinned(calls: &GpuCalls) -> Held {
    let allocs = calls.allocs.iter().filter(|a| a.space == gpu_space::PINNED);
    Held {
        device: None,
        points: replay(allocs.collect()),
    }
}

/// Whether allocation `a` was held at `t_ns`.
pub fn held_at(a: &GpuAllocEvent, t_ns: u64) -> bool {
    a.t_ns <= t_ns && a.freed_ns.is_none_or(|f| f > t_ns)
}

/// The bytes `allocs` held after each instant with a call. Within an instant frees come first
/// and then allocations, so the value after it is also the highest reached during it (the
/// running sum dips below the previous instant's, then rises to it).
fn replay(allocs: Vec<&GpuAllocEvent>) -> Vec<(u64, u64)> {
    let mut steps: Vec<(u64, i128)> = Vec::with_capacity(2 * allocs.len());
    for a in allocs {
        steps.push((a.t_ns, i128::from(a.size)));
        if let Some(f) = a.freed_ns {
            steps.push((f, -i128::from(a.size)));
        }
    }
    steps.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut now = 0i128;
    for (t, change) in steps {
        now += change;
        let bytes = u64::try_from(now).unwrap_or(0);
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 = bytes,
            _ => out.push((t, bytes)),
        }
    }
    out
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
        let held = devices(&calls);
        let got: Vec<_> = held.iter().map(|h| (h.device, h.peak(), h.end())).collect();
        assert_eq!(
            got,
            vec![(Some(0), (160, 3), 100), (Some(1), (500, 4), 300)]
        );
        assert_eq!(held[0].points, vec![(1, 100), (2, 150), (3, 160), (9, 100)]);
        assert!(held_at(&calls.allocs[2], 3) && !held_at(&calls.allocs[1], 3));
    }

    #[test]
    fn pinned_memory_is_replayed_apart_from_the_devices() {
        let mut host = alloc(5, 70, 0, Some(8));
        host.space = gpu_space::PINNED;
        host.device = None;
        let calls = GpuCalls {
            allocs: vec![alloc(1, 10, 0, None), host],
            ..GpuCalls::default()
        };
        assert_eq!(pinned(&calls).points, vec![(5, 70), (8, 0)]);
        assert_eq!(devices(&calls)[0].points, vec![(1, 10)]);
    }
}
