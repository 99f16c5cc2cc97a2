//! The store of one channel's kernel records (CUPTI's, sent by the preload library; see
//! docs/design/gpu-kernel-time.md), filled by the decoder and joined here: a sampled launch
//! carries an id the preload pushed to CUPTI around it; a correlation record pairs that id with
//! CUPTI's id of the call; each kernel names the call that launched it. Every kernel is summed
//! per device and name; one of a sampled launch is also folded under the launch's thread and
//! stack, standing for the launch sample's weight. Everything read is the profiled process's
//! word: times, names and ids are checked and bounded.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use mlprof_wire::{gpu_trace, GpuKernel};

use super::gpu_calls::{row, Rows};
use crate::recording::{GpuKernelSum, GpuKernelTotal, GpuKernels};

/// Most distinct kernel names kept per process; later ones share one row.
pub const MAX_NAMES: usize = 20_000;
/// Most sampled launches waiting for their correlation, and correlations waiting for their
/// kernels (a graph launch runs many kernels under one call), each: the oldest go first.
pub const MAX_PENDING: usize = 1 << 16;
/// The longest a kernel is believed to run (a day).
const MAX_KERNEL_NS: u64 = 86_400 * 1_000_000_000;
/// The name every kernel beyond [`MAX_NAMES`] names shares.
const OTHER_KERNELS: &str = "<other kernels>";

type Frames = Vec<(u32, i32)>;

/// A sampled launch: its thread, stack, weight and time.
#[derive(Clone, Debug)]
struct Launch {
    tid: u32,
    frames: Frames,
    weight: u64,
    t_ns: u64,
    stretch: u64,
}

/// One channel's kernel records.
#[derive(Clone, Debug, Default)]
pub struct KernelStore {
    /// Index in `kernels.names` of each name key seen.
    names: HashMap<u64, u32>,
    /// Sampled launches by the id they carry, until their correlation arrives.
    launches: Bounded<u64, Launch>,
    /// Sampled launches by CUPTI's id of their call.
    calls: Bounded<u32, Launch>,
    /// The row of `kernels.all` of each (device, name).
    sums: HashMap<(u32, u32), usize>,
    /// The rows of `kernels.sampled`, by thread, stack, device and name.
    rows: Rows<(u32, Frames, u32, u32)>,
    /// Rows dropped by the bounds.
    pub dropped: u64,
}

impl KernelStore {
    /// A launch sample that carried id `external` arrived with its frames.
    pub fn launch(
        &mut self,
        external: u64,
        tid: u32,
        frames: &Frames,
        weight: u64,
        t_ns: u64,
        stretch: u64,
    ) {
        if external == 0 {
            return;
        }
        let launch = Launch {
            tid,
            frames: frames.clone(),
            weight,
            t_ns,
            stretch,
        };
        self.launches.insert(external, launch);
    }

    /// The sampled launch `external` was CUPTI's call `correlation`.
    pub fn correlation(&mut self, external: u64, correlation: u32) {
        if let Some(launch) = self.launches.remove(&external) {
            self.calls.insert(correlation, launch);
        }
    }

    /// A kernel ran: summed per device and name, and under its launch's stack when that was
    /// sampled. Returns `false` when it is nonsense (it ended before it began, or ran longer
    /// than a day).
    pub fn kernel(&mut self, out: &mut GpuKernels, k: &GpuKernel) -> bool {
        let Some(ns) = k
            .end_ns
            .checked_sub(k.start_ns)
            .filter(|&n| n <= MAX_KERNEL_NS)
        else {
            return false;
        };
        let name = self.name_index(out, k.name);
        let sums = &mut self.sums;
        let all = &mut out.all;
        let i = *sums.entry((k.device, name)).or_insert_with(|| {
            all.push(GpuKernelSum {
                device: k.device,
                name,
                ..GpuKernelSum::default()
            });
            all.len() - 1
        });
        all[i].kernels += 1;
        all[i].device_ns = all[i].device_ns.saturating_add(ns);
        let Some(l) = self.calls.get(&k.correlation) else {
            return true;
        };
        let key = ((l.tid, l.frames.clone(), k.device, name), l.stretch);
        let (t, weight) = (l.t_ns, l.weight);
        let made = |(tid, frames, device, name)| GpuKernelTotal {
            tid,
            frames,
            device,
            name,
            first_ns: t,
            ..GpuKernelTotal::default()
        };
        match row(&mut self.rows, &mut out.sampled, key, made) {
            Some(r) => {
                r.kernels = r.kernels.saturating_add(weight);
                r.device_ns = r.device_ns.saturating_add(ns.saturating_mul(weight));
                r.last_ns = r.last_ns.max(t);
            }
            None => self.dropped += 1,
        }
        true
    }

    /// The name of key `key` arrived (its bytes, cut by the process).
    pub fn name(&mut self, out: &mut GpuKernels, key: u64, bytes: &[u8]) {
        let i = self.name_index(out, key) as usize;
        if let Some(slot) = out.names.get_mut(i) {
            if slot.is_empty() {
                *slot = String::from_utf8_lossy(bytes).into_owned();
            }
        }
    }

    /// The trace's state changed (`gpu_trace`), at `t_ns`.
    pub fn trace(out: &mut GpuKernels, state: u8, detail: u64, t_ns: u64) {
        match state {
            gpu_trace::DROPPED => out.dropped = out.dropped.max(detail),
            gpu_trace::PROGRAM_OWNS => {
                out.taken_ns.get_or_insert(t_ns);
                out.state = Some((state, detail));
            }
            _ => out.state = Some((state, detail)),
        }
    }

    /// Forget everything (what was stored was taken).
    pub fn clear(&mut self) {
        *self = KernelStore {
            dropped: self.dropped,
            ..KernelStore::default()
        };
    }

    /// The index of name key `key`: a new (empty) name when it is new, the shared row past
    /// [`MAX_NAMES`].
    fn name_index(&mut self, out: &mut GpuKernels, key: u64) -> u32 {
        if let Some(&i) = self.names.get(&key) {
            return i;
        }
        let names = &mut out.names;
        if names.len() >= MAX_NAMES {
            if names.len() == MAX_NAMES {
                names.push(OTHER_KERNELS.to_string());
            }
            return MAX_NAMES as u32;
        }
        names.push(String::new());
        let i = (names.len() - 1) as u32;
        self.names.insert(key, i);
        i
    }
}

/// A map of at most [`MAX_PENDING`] entries: the oldest inserted go first.
#[derive(Clone, Debug)]
struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<K: Eq + Hash + Copy, V> Bounded<K, V> {
    fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key, value).is_none() {
            self.order.push_back(key);
        }
        while self.map.len() > MAX_PENDING {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
        // Keys removed by hand stay in `order` until they come up: keep it bounded too.
        if self.order.len() > 2 * MAX_PENDING {
            let map = &self.map;
            self.order.retain(|k| map.contains_key(k));
        }
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(start: u64, end: u64, correlation: u32, name: u64) -> GpuKernel {
        GpuKernel {
            start_ns: start,
            end_ns: end,
            device: 0,
            stream: 7,
            correlation,
            name,
        }
    }

    #[test]
    fn kernels_of_sampled_launches_are_joined_through_their_correlation() {
        let (mut s, mut out) = (KernelStore::default(), GpuKernels::default());
        s.launch(11, 1, &vec![(3, 4)], 64, 100, 0);
        s.launch(0, 1, &vec![(5, 6)], 64, 110, 0); // carried no id: never joined
        s.correlation(11, 900);
        s.correlation(12, 901); // an id no launch sample carried
        s.name(&mut out, 0xa, b"gemm");
        assert!(s.kernel(&mut out, &kernel(1000, 1500, 900, 0xa)));
        // A graph launch: many kernels under one call.
        assert!(s.kernel(&mut out, &kernel(1500, 1700, 900, 0xb)));
        assert!(s.kernel(&mut out, &kernel(2000, 2100, 901, 0xa)));
        assert!(s.kernel(&mut out, &kernel(2100, 2200, 77, 0xa))); // not sampled
        s.name(&mut out, 0xb, b"relu");
        // Nonsense is refused and counts nowhere.
        assert!(!s.kernel(&mut out, &kernel(3000, 2000, 900, 0xa)));
        assert!(!s.kernel(&mut out, &kernel(0, MAX_KERNEL_NS + 1, 900, 0xa)));
        let gemm = out.all.iter().find(|k| out.name(k.name) == "gemm").unwrap();
        assert_eq!((gemm.kernels, gemm.device_ns), (3, 700));
        let relu = out.all.iter().find(|k| out.name(k.name) == "relu").unwrap();
        assert_eq!((relu.kernels, relu.device_ns), (1, 200));
        // The sampled launch's kernels stand for its weight, under its stack.
        let mut rows: Vec<_> = out
            .sampled
            .iter()
            .map(|r| (out.name(r.name), r.frames.clone(), r.kernels, r.device_ns))
            .collect();
        rows.sort();
        assert_eq!(
            rows,
            vec![
                ("gemm", vec![(3, 4)], 64, 500 * 64),
                ("relu", vec![(3, 4)], 64, 200 * 64),
            ]
        );
    }

    #[test]
    fn names_are_bounded_and_the_first_told_is_kept() {
        let (mut s, mut out) = (KernelStore::default(), GpuKernels::default());
        for key in 1..=(MAX_NAMES as u64 + 10) {
            assert!(s.kernel(&mut out, &kernel(0, 10, 1, key)));
        }
        assert_eq!(out.names.len(), MAX_NAMES + 1);
        assert_eq!(out.names[MAX_NAMES], OTHER_KERNELS);
        let other = out.all.iter().find(|k| k.name == MAX_NAMES as u32).unwrap();
        assert_eq!(other.kernels, 10);
        s.name(&mut out, 1, b"first");
        s.name(&mut out, 1, b"second");
        assert_eq!(out.name(0), "first");
    }

    #[test]
    fn waiting_launches_are_bounded() {
        let mut s = KernelStore::default();
        for id in 1..=(MAX_PENDING as u64 + 100) {
            s.launch(id, 1, &vec![(1, 1)], 1, 0, 0);
        }
        assert_eq!(s.launches.map.len(), MAX_PENDING);
        assert!(s.launches.get(&1).is_none(), "the oldest went first");
        assert!(s.launches.get(&(MAX_PENDING as u64 + 100)).is_some());
        for id in 1..=(MAX_PENDING as u64 * 3) {
            s.correlation(id, id as u32);
        }
        assert!(s.launches.order.len() <= 2 * MAX_PENDING);
    }
}
