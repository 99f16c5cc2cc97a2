//! The store of one channel's CUDA calls (`recording::GpuCalls`), filled by the decoder:
//! allocations matched to their frees by address, copies and launches folded per thread,
//! stack and kind as they arrive (a training loop copies and launches from the same lines every
//! step: the store grows with the program's lines, not its steps), and per stretch between
//! region boundaries (a region's begin or end starts a new stretch, so a region's cut takes
//! its own rows whole: the store grows with regions that copy, too). Bounded: past
//! [`MAX_ALLOCS`] allocations, those given back longest ago are dropped first; past
//! `rows::MAX_ROWS` rows, the rows of earlier stretches are folded together (what regions no
//! longer see apart), then new rows are dropped.

use std::collections::HashMap;

use mlprof_wire::{gpu_space, GpuCorrelation, GpuKernel};

use super::gpu_kernels::{KernelStore, Launch};
#[cfg(test)]
use super::rows::MAX_ROWS;
use super::rows::{row, Rows};

use crate::recording::{GpuAllocEvent, GpuCalls, GpuCopyTotal, GpuLaunchTotal};

/// Most allocations held (each is a few dozen bytes and its frames).
pub const MAX_ALLOCS: usize = 200_000;

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
    /// A launch sample (`external`: the id it carried to CUPTI, 0 if none).
    Launch {
        tid: u32,
        launches: u64,
        external: u64,
        t_ns: u64,
    },
}

/// One channel's CUDA calls.
#[derive(Clone, Debug, Default)]
pub struct GpuStore {
    calls: GpuCalls,
    /// Index in `calls.allocs` of each allocation not given back, by (pinned, address).
    live: HashMap<(u8, u64), usize>,
    /// The rows of `calls.copies`, by thread, direction and stack.
    copy_rows: Rows<(u32, u8, Frames)>,
    /// The rows of `calls.launches`, by thread and stack.
    launch_rows: Rows<(u32, Frames)>,
    /// The stretch of the run between region boundaries that calls arrive in now.
    stretch: u64,
    /// The joins of kernel records with launch samples.
    kernels: KernelStore,
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
                external,
                t_ns,
            } => {
                if external != 0 {
                    let sampled = Launch {
                        tid,
                        frames: frames.clone(),
                        weight: launches,
                        t_ns,
                        stretch: self.stretch,
                    };
                    self.kernels
                        .launch(&mut self.calls.kernels, external, sampled);
                }
                self.launch(tid, frames, launches, t_ns)
            }
        }
    }

    /// A kernel record arrived; `false` when it is nonsense.
    pub fn kernel(&mut self, k: &GpuKernel) -> bool {
        self.kernels.kernel(&mut self.calls.kernels, k)
    }

    /// A correlation record arrived.
    pub fn correlation(&mut self, c: GpuCorrelation) {
        self.kernels
            .correlation(&mut self.calls.kernels, c.external, c.correlation);
    }

    /// A kernel name arrived.
    pub fn kernel_name(&mut self, key: u64, bytes: &[u8]) {
        self.kernels.name(&mut self.calls.kernels, key, bytes);
    }

    /// The kernel trace's state changed.
    pub fn kernel_trace(&mut self, state: u8, detail: u64, t_ns: u64) {
        KernelStore::trace(&mut self.calls.kernels, state, detail, t_ns);
    }

    /// Everything stored, leaving nothing.
    pub fn take(&mut self) -> GpuCalls {
        self.live.clear();
        self.copy_rows = Rows::default();
        self.launch_rows = Rows::default();
        self.kernels.clear();
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

    /// A region began or ended: the copies and launches from now on fold into rows of their
    /// own.
    pub fn boundary(&mut self) {
        self.stretch += 1;
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
        let key = ((tid, direction, frames), self.stretch);
        let made = |(tid, direction, frames)| GpuCopyTotal {
            tid,
            direction,
            frames,
            first_ns: t,
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
            first_ns: t_ns,
            ..GpuLaunchTotal::default()
        };
        let key = ((tid, frames), self.stretch);
        let Some(row) = row(&mut self.launch_rows, &mut self.calls.launches, key, made) else {
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
    fn a_region_boundary_starts_rows_of_their_own_with_their_first_and_last_times() {
        let mut s = GpuStore::default();
        for t in 1..=3 {
            s.copy(1, 1, vec![(3, 4)], 10, false, t);
            s.launch(1, vec![(3, 6)], 1, t);
        }
        s.boundary();
        for t in 10..=12 {
            s.copy(1, 1, vec![(3, 4)], 100, false, t);
            s.launch(1, vec![(3, 6)], 2, t);
        }
        let c = s.calls();
        let copies: Vec<_> = c
            .copies
            .iter()
            .map(|r| (r.bytes, r.first_ns, r.last_ns))
            .collect();
        assert_eq!(copies, [(30, 1, 3), (300, 10, 12)]);
        let launches: Vec<_> = c
            .launches
            .iter()
            .map(|r| (r.launches, r.first_ns, r.last_ns))
            .collect();
        assert_eq!(launches, [(3, 1, 3), (6, 10, 12)]);
    }

    #[test]
    fn past_the_bound_earlier_stretches_are_folded_to_make_room() {
        let mut s = GpuStore::default();
        let half = MAX_ROWS as i32 / 2;
        // The same stacks copy in two stretches: the store is full.
        for t in 0..2 {
            for i in 0..half {
                s.copy(1, 1, vec![(1, i)], 1, false, t);
            }
            s.boundary();
        }
        assert_eq!(s.calls().copies.len(), MAX_ROWS);
        // A new row in a third stretch: the first two folded into one row per stack.
        s.copy(1, 1, vec![(2, 0)], 5, false, 9);
        let c = s.calls();
        assert_eq!((c.copies.len(), s.dropped), (half as usize + 1, 0));
        assert_eq!(
            c.copies.iter().map(|r| r.bytes).sum::<u64>(),
            MAX_ROWS as u64 + 5
        );
        let folded = &c.copies[7];
        assert_eq!((folded.calls, folded.first_ns, folded.last_ns), (2, 0, 1));
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
