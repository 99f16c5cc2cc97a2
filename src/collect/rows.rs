//! Rows of calls folded per identity and per stretch of the run between region boundaries
//! (the CUDA calls' copies and launches, the kernels of sampled launches): a row's sums and its
//! first and last times, found by key; past [`MAX_ROWS`], the rows of earlier stretches are
//! folded together (what regions no longer see apart), then new rows are dropped.

use std::collections::HashMap;
use std::hash::Hash;

use crate::recording::{GpuCopyTotal, GpuKernelTotal, GpuLaunchTotal};

/// Most distinct (identity, stretch) rows of one list.
pub const MAX_ROWS: usize = 100_000;

/// The stretch of the rows of earlier stretches folded together to make room.
const FOLDED: u64 = u64::MAX;

/// Rows of calls folded together: the sums of both, from the first's time to the last's.
pub trait Fold {
    fn fold(&mut self, other: &Self);
}

impl Fold for GpuCopyTotal {
    fn fold(&mut self, o: &Self) {
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.calls += o.calls;
        self.synchronous_calls += o.synchronous_calls;
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
    }
}

impl Fold for GpuKernelTotal {
    fn fold(&mut self, o: &Self) {
        self.kernels = self.kernels.saturating_add(o.kernels);
        self.device_ns = self.device_ns.saturating_add(o.device_ns);
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
    }
}

impl Fold for GpuLaunchTotal {
    fn fold(&mut self, o: &Self) {
        self.launches = self.launches.saturating_add(o.launches);
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
    }
}

/// Where the rows of a list of folded calls are.
#[derive(Clone, Debug)]
pub struct Rows<K> {
    /// Each row's place in its list, by its calls' identity and stretch.
    index: HashMap<(K, u64), usize>,
    /// The stretch in which earlier stretches were last folded (none since: nothing to fold).
    folded_in: Option<u64>,
}

impl<K> Default for Rows<K> {
    fn default() -> Self {
        Rows {
            index: HashMap::new(),
            folded_in: None,
        }
    }
}

/// The row of `key` (its calls' identity and stretch) in `list`, made by `make` when the key
/// is new. With [`MAX_ROWS`] rows held, the rows of earlier stretches are folded first (once
/// per stretch: after that, every row is of this stretch or folded); `None` when that left no
/// room.
pub fn row<'a, K: Eq + Hash + Clone, R: Fold>(
    rows: &mut Rows<K>,
    list: &'a mut Vec<R>,
    key: (K, u64),
    make: impl FnOnce(K) -> R,
) -> Option<&'a mut R> {
    let index = &mut rows.index;
    if list.len() >= MAX_ROWS && !index.contains_key(&key) && rows.folded_in != Some(key.1) {
        fold_earlier(index, list, key.1);
        rows.folded_in = Some(key.1);
    }
    let i = match index.get(&key) {
        Some(&i) => i,
        None if list.len() < MAX_ROWS => {
            list.push(make(key.0.clone()));
            index.insert(key, list.len() - 1);
            list.len() - 1
        }
        None => return None,
    };
    list.get_mut(i)
}

/// Fold the rows of every stretch but `current` into one per identity (stretch [`FOLDED`]):
/// their calls stay counted, but a region's cut no longer takes them apart (a folded row
/// spans several stretches, and a region takes only rows wholly inside it).
fn fold_earlier<K: Eq + Hash + Clone, R: Fold>(
    index: &mut HashMap<(K, u64), usize>,
    list: &mut Vec<R>,
    current: u64,
) {
    let mut keys: Vec<Option<(K, u64)>> = vec![None; list.len()];
    for (key, i) in index.drain() {
        if let Some(slot) = keys.get_mut(i) {
            *slot = Some(key);
        }
    }
    for (row, key) in std::mem::take(list).into_iter().zip(keys) {
        let Some((identity, stretch)) = key else {
            continue;
        };
        let stretch = if stretch == current { current } else { FOLDED };
        match index.get(&(identity.clone(), stretch)) {
            Some(&i) => list[i].fold(&row),
            None => {
                index.insert((identity, stretch), list.len());
                list.push(row);
            }
        }
    }
}
