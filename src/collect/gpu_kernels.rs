//! The store of one channel's kernel records (CUPTI's, sent by the preload library; see
//! docs/design/gpu-kernel-time.md), filled by the decoder and joined here: a sampled launch
//! carries an id the preload pushed to CUPTI around it; a correlation record pairs that id with
//! CUPTI's id of the call; each kernel names the call that launched it. Every kernel is summed
//! per device and name; one of a sampled launch is also folded under the launch's thread and
//! stack, standing for the launch sample's weight. Everything read is the profiled process's
//! word: times, names and ids are checked and bounded.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use mlprof_wire::{gpu_trace, GpuKernel};

use super::rows::{row, Rows};
use crate::recording::{GpuKernelSum, GpuKernelTotal, GpuKernels};

/// Most distinct kernel names kept per process; later ones share one row.
pub const MAX_NAMES: usize = 20_000;
/// Most keys each waiting map holds (sampled launches by id, calls by correlation, early
/// correlations, early kernels): the oldest go first.
pub const MAX_PENDING: usize = 1 << 16;
/// Most (device, name) sums of kernels waiting for their call's correlation, over all calls:
/// past it the oldest calls' go first (a graph replay parks one per kernel it ran).
pub const MAX_EARLY: usize = 1 << 20;
/// Most (device, name) sums per process; kernels beyond them are counted as dropped.
pub const MAX_SUMS: usize = 100_000;
/// The longest a kernel is believed to run (a day).
const MAX_KERNEL_NS: u64 = 86_400 * 1_000_000_000;
/// The name every kernel beyond [`MAX_NAMES`] names shares.
const OTHER_KERNELS: &str = "<other kernels>";

type Frames = Vec<(u32, i32)>;

/// Kernels of one device and name waiting for their call's correlation: how many and their
/// device time.
#[derive(Clone, Copy, Debug)]
struct Ran {
    device: u32,
    name: u32,
    count: u64,
    ns: u64,
}

/// A sampled launch: its thread, stack, weight, time and stretch between region boundaries.
#[derive(Clone, Debug)]
pub struct Launch {
    pub tid: u32,
    pub frames: Frames,
    pub weight: u64,
    pub t_ns: u64,
    pub stretch: u64,
}

/// One channel's kernel records.
#[derive(Clone, Debug, Default)]
pub struct KernelStore {
    /// Index in `kernels.names` of each name key seen.
    names: HashMap<u64, u32>,
    /// Sampled launches by the id they carry (each id may pair with several calls).
    launches: Bounded<u64, Arc<Launch>>,
    /// Sampled launches by CUPTI's id of their call.
    calls: Bounded<u32, Arc<Launch>>,
    /// Correlations whose launch sample has not arrived, by the launch's id.
    early_calls: Bounded<u64, Vec<u32>>,
    /// Kernels whose call's correlation has not arrived (most never will: their launch was not
    /// sampled), by CUPTI's id of the call.
    early_kernels: Bounded<u32, Vec<Ran>>,
    /// The sums in `early_kernels`, in all.
    early: usize,
    /// The row of `kernels.all` of each (device, name).
    sums: HashMap<(u32, u32), usize>,
    /// The rows of `kernels.sampled`, by thread, stack, device and name.
    rows: Rows<(u32, Frames, u32, u32)>,
    /// Rows dropped by the bounds.
    pub dropped: u64,
}

impl KernelStore {
    /// A launch sample that carried id `external` arrived with its frames.
    pub fn launch(&mut self, out: &mut GpuKernels, external: u64, launch: Launch) {
        if external == 0 {
            return;
        }
        let launch = Arc::new(launch);
        // Its calls' correlations may have come first (another thread handed CUPTI's buffer
        // over while this launch's stack was still being read).
        for correlation in self.early_calls.remove(&external).unwrap_or_default() {
            self.bind(out, correlation, Arc::clone(&launch));
        }
        self.launches.insert(external, launch);
    }

    /// One of the API calls made while the sampled launch `external` had its id pushed was
    /// CUPTI's call `correlation` (a runtime launch and the driver call inside it each get
    /// one: every one is kept, so the kernel finds whichever launched it).
    pub fn correlation(&mut self, out: &mut GpuKernels, external: u64, correlation: u32) {
        match self.launches.get(&external).cloned() {
            Some(launch) => self.bind(out, correlation, launch),
            None => self.early_calls.push(external, correlation),
        }
    }

    /// Call `correlation` was the sampled `launch`: its kernels that came first are its now.
    fn bind(&mut self, out: &mut GpuKernels, correlation: u32, launch: Arc<Launch>) {
        let waiting = self.early_kernels.remove(&correlation).unwrap_or_default();
        self.early = self.early.saturating_sub(waiting.len());
        for k in waiting {
            self.attribute(out, &launch, k);
        }
        self.calls.insert(correlation, launch);
    }

    /// A kernel ran: summed per device and name, and under its launch's stack when that was
    /// sampled (whichever of the kernel and its correlation arrives second makes the join).
    /// Returns `false` when it is nonsense (it ended before it began, or ran longer than a
    /// day).
    pub fn kernel(&mut self, out: &mut GpuKernels, k: &GpuKernel) -> bool {
        let Some(ns) = k
            .end_ns
            .checked_sub(k.start_ns)
            .filter(|&n| n <= MAX_KERNEL_NS)
        else {
            return false;
        };
        let name = self.name_index(out, k.name);
        let key = (k.device, name);
        let i = match self.sums.get(&key) {
            Some(&i) => i,
            None if out.all.len() < MAX_SUMS => {
                out.all.push(GpuKernelSum {
                    device: k.device,
                    name,
                    ..GpuKernelSum::default()
                });
                self.sums.insert(key, out.all.len() - 1);
                out.all.len() - 1
            }
            None => {
                self.dropped += 1;
                return true;
            }
        };
        if let Some(sum) = out.all.get_mut(i) {
            sum.kernels = sum.kernels.saturating_add(1);
            sum.device_ns = sum.device_ns.saturating_add(ns);
        }
        let ran = Ran {
            device: k.device,
            name,
            count: 1,
            ns,
        };
        match self.calls.get(&k.correlation).cloned() {
            Some(launch) => self.attribute(out, &launch, ran),
            None => self.wait(k.correlation, ran),
        }
        true
    }

    /// Kernel `ran` waits for call `correlation`'s correlation: summed with its kind there.
    fn wait(&mut self, correlation: u32, ran: Ran) {
        if let Some(list) = self.early_kernels.get_mut(&correlation) {
            match list
                .iter_mut()
                .find(|r| r.device == ran.device && r.name == ran.name)
            {
                Some(r) => {
                    r.count = r.count.saturating_add(ran.count);
                    r.ns = r.ns.saturating_add(ran.ns);
                }
                None => {
                    list.push(ran);
                    self.early += 1;
                }
            }
        } else {
            self.early += 1;
            if let Some(gone) = self.early_kernels.insert(correlation, vec![ran]) {
                self.early = self.early.saturating_sub(gone.len());
            }
        }
        while self.early > MAX_EARLY {
            match self.early_kernels.pop_oldest() {
                Some(gone) => self.early = self.early.saturating_sub(gone.len()),
                None => break,
            }
        }
    }

    /// Fold kernel `k` under its sampled `launch`, standing for the launch's weight.
    fn attribute(&mut self, out: &mut GpuKernels, l: &Launch, k: Ran) {
        let key = ((l.tid, l.frames.clone(), k.device, k.name), l.stretch);
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
                r.kernels = r.kernels.saturating_add(k.count.saturating_mul(weight));
                r.device_ns = r.device_ns.saturating_add(k.ns.saturating_mul(weight));
                r.last_ns = r.last_ns.max(t);
            }
            None => self.dropped += 1,
        }
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

impl<K: Eq + Hash + Copy, T> Bounded<K, Vec<T>> {
    /// Add `value` to the list of `key` (a new key counts against the bound).
    fn push(&mut self, key: K, value: T) {
        match self.map.get_mut(&key) {
            Some((_, list)) if list.len() < MAX_PER_KEY => list.push(value),
            Some(_) => {}
            None => {
                self.insert(key, vec![value]);
            }
        }
    }
}

/// Most correlations waiting under one launch id (a launch's runtime and driver calls).
const MAX_PER_KEY: usize = 64;

/// A map of at most [`MAX_PENDING`] keys: the oldest inserted go first. Each key's insertion
/// is numbered, so that a key removed and inserted again is evicted by its new number only.
#[derive(Clone, Debug)]
struct Bounded<K, V> {
    map: HashMap<K, (u64, V)>,
    order: VecDeque<(K, u64)>,
    next: u64,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
        }
    }
}

impl<K: Eq + Hash + Copy, V> Bounded<K, V> {
    /// Insert `value` under `key`; returns what an eviction took to make room, if anything.
    fn insert(&mut self, key: K, value: V) -> Option<V> {
        let number = self.next;
        self.next += 1;
        // A key inserted again: its earlier place in `order` is stale now.
        self.map.insert(key, (number, value));
        self.order.push_back((key, number));
        let mut gone = None;
        while self.map.len() > MAX_PENDING {
            match self.pop_oldest() {
                Some(v) => gone = Some(v),
                None => break,
            }
        }
        // Places of keys removed or replaced stay in `order` until they come up: keep it
        // bounded too.
        if self.order.len() > 2 * MAX_PENDING {
            let map = &self.map;
            self.order
                .retain(|(k, n)| map.get(k).is_some_and(|(m, _)| m == n));
        }
        gone
    }

    /// Take the oldest key's value out.
    fn pop_oldest(&mut self) -> Option<V> {
        while let Some((key, number)) = self.order.pop_front() {
            if self.map.get(&key).is_some_and(|(n, _)| *n == number) {
                return self.map.remove(&key).map(|(_, v)| v);
            }
        }
        None
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key).map(|(_, v)| v)
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|(_, v)| v)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(tid: u32, frames: Frames, weight: u64, t_ns: u64, stretch: u64) -> Launch {
        Launch {
            tid,
            frames,
            weight,
            t_ns,
            stretch,
        }
    }

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
        s.launch(&mut out, 11, launch(1, vec![(3, 4)], 64, 100, 0));
        s.launch(&mut out, 0, launch(1, vec![(5, 6)], 64, 110, 0)); // carried no id: never joined
        s.correlation(&mut out, 11, 900);
        s.correlation(&mut out, 12, 901); // an id no launch sample carried
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
    fn the_join_holds_whatever_order_the_records_arrive_in() {
        // CUPTI hands buffers over from several threads: a kernel may come before its call's
        // correlation, a correlation before its launch sample, and one pushed id may pair with
        // two calls (the runtime's launch and the driver call inside it).
        let (mut s, mut out) = (KernelStore::default(), GpuKernels::default());
        assert!(s.kernel(&mut out, &kernel(0, 100, 7, 0xa))); // call 7: its correlation later
        s.correlation(&mut out, 21, 8); // launch 21's driver call: before the launch sample
        s.correlation(&mut out, 21, 7); // and its runtime call
        s.launch(&mut out, 21, launch(1, vec![(3, 4)], 1, 50, 0));
        assert!(s.kernel(&mut out, &kernel(100, 130, 8, 0xa))); // after everything
        assert!(s.kernel(&mut out, &kernel(130, 140, 9, 0xa))); // an unsampled launch's
        let rows: Vec<_> = out
            .sampled
            .iter()
            .map(|r| (r.kernels, r.device_ns))
            .collect();
        assert_eq!(rows, vec![(2, 130)]);
        assert_eq!((out.all[0].kernels, out.all[0].device_ns), (3, 140));
    }

    #[test]
    fn a_graphs_kernels_wait_summed_and_waiting_kernels_are_bounded() {
        let (mut s, mut out) = (KernelStore::default(), GpuKernels::default());
        // One call (a graph replay) runs 1000 kernels of two names before its correlation.
        for i in 0..1000u64 {
            assert!(s.kernel(&mut out, &kernel(i * 10, i * 10 + 4, 5, 0xa + i % 2)));
        }
        assert_eq!(s.early, 2, "summed per device and name");
        s.correlation(&mut out, 9, 5);
        s.launch(&mut out, 9, launch(1, vec![(2, 2)], 3, 0, 0));
        let rows: Vec<_> = out
            .sampled
            .iter()
            .map(|r| (r.kernels, r.device_ns))
            .collect();
        assert_eq!(
            rows,
            vec![(1500, 6000), (1500, 6000)],
            "each standing for weight 3"
        );
        assert_eq!(s.early, 0);
        // Unsampled calls' kernels never claimed: bounded in all.
        for c in 0..(MAX_PENDING as u32 + 10) {
            assert!(s.kernel(&mut out, &kernel(0, 1, 1000 + c, 0xa)));
        }
        assert!(s.early <= MAX_PENDING && s.early_kernels.map.len() <= MAX_PENDING);
    }

    #[test]
    fn a_key_inserted_again_is_evicted_by_its_new_place() {
        let mut b: Bounded<u32, u32> = Bounded::default();
        b.insert(1, 10);
        b.remove(&1);
        b.insert(1, 11);
        for k in 2..=(MAX_PENDING as u32) {
            b.insert(k, k);
        }
        assert_eq!(
            b.get(&1),
            Some(&11),
            "still within the bound by its new place"
        );
        b.insert(0, 0);
        assert_eq!(b.get(&1), None, "now the oldest");
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
        let (mut s, mut out) = (KernelStore::default(), GpuKernels::default());
        for id in 1..=(MAX_PENDING as u64 + 100) {
            s.launch(&mut out, id, launch(1, vec![(1, 1)], 1, 0, 0));
        }
        assert_eq!(s.launches.map.len(), MAX_PENDING);
        assert!(s.launches.get(&1).is_none(), "the oldest went first");
        assert!(s.launches.get(&(MAX_PENDING as u64 + 100)).is_some());
        for id in 1..=(MAX_PENDING as u64 * 3) {
            s.correlation(&mut out, id, id as u32);
        }
        assert!(s.launches.order.len() <= 2 * MAX_PENDING);
        assert!(s.early_calls.map.len() <= MAX_PENDING);
    }
}
