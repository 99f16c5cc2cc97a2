//! The store of one channel's CUDA calls (`recording::GpuCalls`), filled by the decoder:
//! allocations matched to their frees by address, copies and launches folded per thread,
//! stack and kind as they arrive (a training loop copies and launches from the same lines every
//! step: the store grows with the program's lines, not its steps). Bounded: past
//! [`MAX_ALLOCS`] allocations, those given back longest ago are dropped first.

use std::collections::HashMap;
use std::hash::Hash;

use mlprof_wire::gpu_space;

use crate::recording::{GpuAllocEvent, GpuCalls, GpuCopyTotal, GpuLaunchTotal};

/// Most allocations held (each is a few dozen bytes and its frames).
pub const MAX_ALLOCS: usize = 200_000;
/// Most distinct (thread, stack, kind) rows of copies and of launches.
pub const MAX_ROWS: usize = 100_000;

type Frames = Vec<(u32, i32)>;

/// A call the decoder read, waiting for its frames.
#[derive(Clone, Debug)]
pub enum Call {
    /// An allocation (its `frames` empty).
    Alloc(GpuAllocEvent),
    /// A copy.
    Copy {
        tid: u32,
        direction: u8,
        bytes: u64,
        synchronous: bool,
        t_ns: u64,
    },
    /// A launch sample.
    Launch { tid: u32, launches: u64, t_ns: u64 },
}

/// One channel's CUDA calls.
#[derive(Clone, Debug, Default)]
pub struct GpuStore {
    calls: GpuCalls,
    /// Index in `calls.allocs` of each allocation not given back, by (pinned, address).
    live: HashMap<(u8, u64), usize>,
    copy_rows: HashMap<(u32, u8, Frames), usize>,
    launch_rows: HashMap<(u32, Frames), usize>,
    /// Calls dropped by the bounds (told as a warning).
    pub dropped: u64,
}

impl GpuStore {
    /// A call arrived with its frames.
    pub fn add(&mut self, call: Call, frames: Frames) {
        match call {
            Call::Alloc(event) => self.alloc(GpuAllocEvent { frames, ..event }),
            Call::Copy {
                tid,
                direction,
                bytes,
                synchronous,
                t_ns,
            } => self.copy(tid, direction, frames, bytes, synchronous, t_ns),
            Call::Launch {
                tid,
                launches,
                t_ns,
            } => self.launch(tid, frames, launches, t_ns),
        }
    }

    /// Everything stored, leaving nothing.
    pub fn take(&mut self) -> GpuCalls {
        self.live.clear();
        self.copy_rows.clear();
        self.launch_rows.clear();
        std::mem::take(&mut self.calls)
    }

    /// An allocation arrived.
    pub fn alloc(&mut self, event: GpuAllocEvent) {
        if self.calls.allocs.len() >= MAX_ALLOCS && !self.drop_freed() {
            self.dropped += 1;
            return;
        }
        let key = (gpu_space::key_class(event.space), event.addr);
        self.live.insert(key, self.calls.allocs.len());
        self.calls.allocs.push(event);
    }

    /// The allocation at `addr` was given back at `t_ns`.
    pub fn free(&mut self, addr: u64, space: u8, t_ns: u64) {
        let key = (gpu_space::key_class(space), addr);
        match self
            .live
            .remove(&key)
            .and_then(|i| self.calls.allocs.get_mut(i))
        {
            Some(a) => a.freed_ns = Some(t_ns.max(a.t_ns)),
            None => self.calls.unmatched_frees += 1,
        }
    }

    /// A copy arrived.
    pub fn copy(
        &mut self,
        tid: u32,
        direction: u8,
        frames: Frames,
        bytes: u64,
        sync: bool,
        t: u64,
    ) {
        let key = (tid, direction, frames);
        let made = |(tid, direction, frames)| GpuCopyTotal {
            tid,
            direction,
            frames,
            ..GpuCopyTotal::default()
        };
        let Some(row) = row(&mut self.copy_rows, &mut self.calls.copies, key, made) else {
            self.dropped += 1;
            return;
        };
        row.bytes = row.bytes.saturating_add(bytes);
        row.calls += 1;
        row.synchronous_calls += u64::from(sync);
        row.last_ns = row.last_ns.max(t);
    }

    /// A launch sample standing for `launches` arrived.
    pub fn launch(&mut self, tid: u32, frames: Frames, launches: u64, t_ns: u64) {
        let made = |(tid, frames)| GpuLaunchTotal {
            tid,
            frames,
            ..GpuLaunchTotal::default()
        };
        let rows = &mut self.launch_rows;
        let Some(row) = row(rows, &mut self.calls.launches, (tid, frames), made) else {
            self.dropped += 1;
            return;
        };
        row.launches = row.launches.saturating_add(launches);
        row.last_ns = row.last_ns.max(t_ns);
    }

    /// What was stored so far.
    pub fn calls(&self) -> &GpuCalls {
        &self.calls
    }

    /// Make room by dropping the half of the allocations given back longest ago; `false` when
    /// none was given back.
    fn drop_freed(&mut self) -> bool {
        let mut freed: Vec<u64> = self
            .calls
            .allocs
            .iter()
            .filter_map(|a| a.freed_ns)
            .collect();
        if freed.is_empty() {
            return false;
        }
        freed.sort_unstable();
        let cut = freed[(freed.len() - 1) / 2];
        self.calls
            .allocs
            .retain(|a| a.freed_ns.is_none_or(|f| f > cut));
        self.live = self
            .calls
            .allocs
            .iter()
            .enumerate()
            .filter(|(_, a)| a.freed_ns.is_none())
            .map(|(i, a)| ((gpu_space::key_class(a.space), a.addr), i))
            .collect();
        true
    }
}

/// The row of `key` in `list`, made by `make` when the key is new (`index`: each key's place
/// in `list`); `None` when it is new and [`MAX_ROWS`] rows are held already.
fn row<'a, K: Eq + Hash + Clone, R>(
    index: &mut HashMap<K, usize>,
    list: &'a mut Vec<R>,
    key: K,
    make: impl FnOnce(K) -> R,
) -> Option<&'a mut R> {
    let i = match index.get(&key) {
        Some(&i) => i,
        None if list.len() < MAX_ROWS => {
            list.push(make(key.clone()));
            index.insert(key, list.len() - 1);
            list.len() - 1
        }
        None => return None,
    };
    list.get_mut(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(t_ns: u64, addr: u64, size: u64, space: u8) -> GpuAllocEvent {
        GpuAllocEvent {
            t_ns,
            addr,
            size,
            space,
            device: Some(0),
            ..GpuAllocEvent::default()
        }
    }

    #[test]
    fn frees_find_their_allocation_by_address_and_kind_of_memory() {
        let mut s = GpuStore::default();
        s.alloc(alloc(1, 0x1000, 10, gpu_space::DEVICE));
        s.alloc(alloc(2, 0x1000, 20, gpu_space::PINNED)); // same number, host memory
        s.free(0x1000, gpu_space::PINNED, 5);
        s.free(0x1000, gpu_space::DEVICE, 7);
        s.free(0x1000, gpu_space::DEVICE, 9); // twice: the second matches nothing
        let a = &s.calls().allocs;
        assert_eq!((a[0].freed_ns, a[1].freed_ns), (Some(7), Some(5)));
        assert_eq!(s.calls().unmatched_frees, 1);
        // An address reused after its free is a new allocation.
        s.alloc(alloc(10, 0x1000, 30, gpu_space::DEVICE));
        s.free(0x1000, gpu_space::DEVICE, 11);
        assert_eq!(s.calls().allocs[2].freed_ns, Some(11));
    }

    #[test]
    fn copies_and_launches_fold_per_thread_stack_and_direction() {
        let mut s = GpuStore::default();
        for i in 0..1000 {
            s.copy(1, 1, vec![(3, 4)], 100, i % 2 == 0, i);
            s.copy(1, 2, vec![(3, 4)], 7, false, i);
            s.launch(1, vec![(3, 6)], 16, i);
        }
        s.copy(2, 1, vec![(3, 4)], 1, true, 5);
        let c = s.calls();
        assert_eq!(c.copies.len(), 3);
        assert_eq!((c.copies[0].bytes, c.copies[0].calls), (100_000, 1000));
        assert_eq!(c.copies[0].synchronous_calls, 500);
        assert_eq!((c.copies[1].bytes, c.copies[1].last_ns), (7000, 999));
        assert_eq!(c.launches.len(), 1);
        assert_eq!(c.launches[0].launches, 16_000);
    }

    #[test]
    fn past_the_bound_new_rows_are_dropped_and_counted_and_old_ones_still_fold() {
        let mut s = GpuStore::default();
        for i in 0..MAX_ROWS as i32 {
            s.copy(1, 1, vec![(1, i)], 1, false, 0);
            s.launch(1, vec![(1, i)], 1, 0);
        }
        s.copy(1, 1, vec![(2, 0)], 1, false, 0); // a new stack: no room
        s.launch(1, vec![(2, 0)], 1, 0);
        s.copy(1, 1, vec![(1, 7)], 5, true, 9); // a known one: folded
        s.launch(1, vec![(1, 7)], 3, 9);
        assert_eq!(s.dropped, 2);
        let c = s.calls();
        assert_eq!((c.copies.len(), c.launches.len()), (MAX_ROWS, MAX_ROWS));
        assert_eq!((c.copies[7].bytes, c.copies[7].calls), (6, 2));
        assert_eq!((c.launches[7].launches, c.launches[7].last_ns), (4, 9));
    }

    #[test]
    fn past_the_bound_the_allocations_given_back_longest_ago_make_room() {
        let mut s = GpuStore::default();
        for i in 0..MAX_ALLOCS as u64 {
            s.alloc(alloc(i, 0x10_0000 + i * 16, 1, gpu_space::DEVICE));
            if i % 2 == 0 {
                s.free(0x10_0000 + i * 16, gpu_space::DEVICE, i + 1);
            }
        }
        s.alloc(alloc(u64::MAX / 2, 0x9, 5, gpu_space::DEVICE));
        let c = s.calls();
        assert!(c.allocs.len() < MAX_ALLOCS);
        // Every allocation still held is kept, and its free still finds it.
        assert_eq!(
            c.allocs.iter().filter(|a| a.freed_ns.is_none()).count(),
            MAX_ALLOCS / 2 + 1
        );
        s.free(0x10_0000 + 16, gpu_space::DEVICE, u64::MAX / 2 + 1);
        assert_eq!(s.calls().unmatched_frees, 0);
        assert_eq!(s.dropped, 0);
    }
}
