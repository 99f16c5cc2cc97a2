//! The allocator traces cut to a region (docs/design/gpu-tensors.md): each traced process of
//! a region gets the events of its trace made inside the region, times shifted as the cut's
//! other events are, and the blocks live at the region's end. What was allocated before the
//! region becomes one block with no stack, so that the region's lines are charged only with
//! tensors made inside it, its peak counts everything its process held, and the bytes held at
//! its begin are known. Each trace is replayed once for the whole run ([`TraceIndex::new`]);
//! a cut then costs what happened inside the region.

use std::collections::HashMap;

use super::super::gpu_tensors::Replay;
use crate::recording::gpu_tensors::{Action, DeviceTrace, TensorTrace, TraceEvent, TraceState};

/// The address of the block that stands for everything allocated before a region and held
/// through it (CUDA never hands out this address).
const BEFORE: u64 = u64::MAX;

/// One process's trace, replayed once.
pub(in crate::model) struct TraceIndex<'a> {
    trace: &'a TensorTrace,
    devices: Vec<DeviceIndex>,
}

/// One device's events, replayed: what the allocator held after each.
struct DeviceIndex {
    /// When each event happened (ns from launch; never earlier than the event before), or
    /// `None` if one of them has no time (the allocator's clock was not matched with the run's).
    times: Option<Vec<u64>>,
    /// Bytes allocated after the first `k` events (`k` = 0: before the first).
    level: Vec<u64>,
    /// Bytes reserved after the first `k` events.
    reserved: Vec<u64>,
    /// For an allocation: the event that gave it back, if one did.
    freed_at: Vec<Option<usize>>,
    /// For a free: the allocation it gave back (`None`: made before the first event), and its
    /// bytes; for an allocation, the block it replaced at its address without a free, if any.
    frees: Vec<Option<(Option<usize>, u64)>>,
    /// Whether the ring was full: its oldest events were overwritten.
    wrapped: bool,
}

impl<'a> TraceIndex<'a> {
    pub(in crate::model) fn new(trace: &'a TensorTrace) -> TraceIndex<'a> {
        TraceIndex {
            trace,
            devices: trace
                .devices
                .iter()
                .map(|d| DeviceIndex::new(d, trace.entries))
                .collect(),
        }
    }

    pub(in crate::model) fn pid(&self) -> u32 {
        self.trace.pid
    }

    /// Bytes of tensors allocated on its devices at `at` (ns from launch), summed; 0 when
    /// the trace cannot be cut there.
    pub(in crate::model) fn allocated_at(&self, at: u64) -> u64 {
        if self.uncut(at).is_some() {
            return 0;
        }
        self.devices
            .iter()
            .filter_map(|d| Some(d.level[d.times.as_ref()?.partition_point(|&t| t < at)]))
            .fold(0, u64::saturating_add)
    }

    /// Why the trace cannot be cut at `from`, if it cannot.
    fn uncut(&self, from: u64) -> Option<&'static str> {
        if self.devices.iter().any(|d| d.times.is_none()) {
            return Some(
                "the allocator's clock could not be matched with the run's, so its trace was \
                 not cut to the region",
            );
        }
        // What happened between the region's begin and the oldest event kept is lost.
        let lost = |d: &DeviceIndex| {
            d.wrapped
                && d.times
                    .as_ref()
                    .and_then(|t| t.first())
                    .is_some_and(|&t| t > from)
        };
        self.devices.iter().any(lost).then_some(
            "the region began before the oldest event the allocator's trace kept, so its \
             tensors are not known (MLPROF_GPU_TRACE_ENTRIES keeps more)",
        )
    }

    /// The trace cut to `[from, to]` (ns from launch), times counted from `from`.
    pub(in crate::model) fn cut(&self, from: u64, to: u64) -> TensorTrace {
        let t = self.trace;
        let mut out = TensorTrace {
            pid: t.pid,
            state: t.state.clone(),
            torch: t.torch.clone(),
            entries: t.entries,
            region: true,
            ..TensorTrace::default()
        };
        if t.state != TraceState::Done {
            return out;
        }
        if let Some(why) = self.uncut(from) {
            out.state = TraceState::Failed(why.into());
            return out;
        }
        let mut stacks = Stacks::default();
        for (raw, d) in t.devices.iter().zip(&self.devices) {
            out.devices.push(d.cut(raw, from, to, &mut stacks));
        }
        (out.frames, out.stacks) = stacks.tables(t);
        out
    }
}

impl DeviceIndex {
    fn new(d: &DeviceTrace, entries: u64) -> DeviceIndex {
        let replay = Replay::new(d);
        let n = d.events.len();
        let mut live: HashMap<u64, (Option<usize>, u64)> = replay
            .start
            .iter()
            .map(|(&a, b)| (a, (None, b.0)))
            .collect();
        let mut level = Vec::with_capacity(n + 1);
        let mut reserved = Vec::with_capacity(n + 1);
        level.push(live.values().fold(0u64, |a, b| a.saturating_add(b.1)));
        reserved.push(replay.start_reserved);
        let mut freed_at = vec![None; n];
        let mut frees = vec![None; n];
        for (i, e) in d.events.iter().enumerate() {
            let (mut l, mut r) = (level[i], reserved[i]);
            match e.action {
                Action::Alloc => {
                    // A block handed out again without a free between: the old one ends here.
                    if let Some((made, old)) = live.insert(e.addr, (Some(i), e.size)) {
                        l = l.saturating_sub(old);
                        if let Some(m) = made {
                            freed_at[m] = Some(i);
                        }
                        frees[i] = Some((made, old));
                    }
                    l = l.saturating_add(e.size);
                }
                Action::Free => {
                    if let Some((made, size)) = live.remove(&e.addr) {
                        l = l.saturating_sub(size);
                        if let Some(m) = made {
                            freed_at[m] = Some(i);
                        }
                        frees[i] = Some((made, size));
                    }
                }
                Action::SegmentAlloc => r = r.saturating_add(e.size),
                Action::SegmentFree => r = r.saturating_sub(e.size),
                Action::Oom => {}
            }
            level.push(l);
            reserved.push(r);
        }
        let times = d
            .events
            .iter()
            .map(|e| e.t_ns)
            .collect::<Option<Vec<u64>>>()
            .map(|mut times| {
                // Never earlier than the one before, so that a region's events are one run.
                for i in 1..times.len() {
                    times[i] = times[i].max(times[i - 1]);
                }
                times
            });
        // As `gpu_tensors::notes` tells it: every action counts against the ring.
        let held = if d.ring > 0 { d.ring } else { n as u64 };
        DeviceIndex {
            times,
            level,
            reserved,
            freed_at,
            frees,
            wrapped: entries > 0 && held >= entries,
        }
    }

    /// The device's trace cut to `[from, to]`; its stacks renumbered in `stacks`.
    fn cut(&self, d: &DeviceTrace, from: u64, to: u64, stacks: &mut Stacks) -> DeviceTrace {
        let times = self.times.as_deref().unwrap_or_default();
        let lo = times.partition_point(|&t| t < from);
        let hi = times.partition_point(|&t| t <= to).max(lo);
        let mut events = Vec::with_capacity(hi - lo + 1);
        let mut live = Vec::new();
        // What was allocated before the region and freed inside it: in the cut, its frees.
        let mut freed_before = 0u64;
        for (i, e) in d.events.iter().enumerate().take(hi).skip(lo) {
            let mut event = TraceEvent {
                stack: e.stack.map(|s| stacks.renumber(s)),
                t_ns: e.t_ns.map(|t| t.saturating_sub(from)),
                ..*e
            };
            match e.action {
                Action::Free => match self.frees[i] {
                    // A block the replay did not know: nothing to give back.
                    None => continue,
                    Some((made, size)) => {
                        event.size = size;
                        if made.is_none_or(|m| m < lo) {
                            freed_before = freed_before.saturating_add(size);
                        }
                    }
                },
                Action::Alloc => {
                    // A block from before the region replaced at its address without a free:
                    // in the cut, it is given back here (it is in the block held from before).
                    if let Some((made, old)) = self.frees[i] {
                        if made.is_none_or(|m| m < lo) {
                            freed_before = freed_before.saturating_add(old);
                            events.push(TraceEvent {
                                action: Action::Free,
                                size: old,
                                stack: None,
                                ..event
                            });
                        }
                    }
                    if self.freed_at[i].is_none_or(|f| f >= hi) {
                        live.push((e.addr, e.size, event.stack));
                    }
                }
                _ => {}
            }
            events.push(event);
        }
        // Held from before the region to its end: one block with no stack.
        let kept = self.level[lo].saturating_sub(freed_before);
        if kept > 0 {
            live.push((BEFORE, kept, None));
        }
        DeviceTrace {
            device: d.device,
            events,
            live,
            reserved: self.reserved[hi],
            max_allocated: None,
            max_requested: None,
            ring: 0,
        }
    }
}

/// The stacks (and their frames) a cut uses, renumbered from 0.
#[derive(Default)]
struct Stacks {
    /// Old stack index → new.
    stacks: HashMap<u32, u32>,
    /// Old stack indices, in new order.
    order: Vec<u32>,
}

impl Stacks {
    fn renumber(&mut self, old: u32) -> u32 {
        let next = self.order.len() as u32;
        *self.stacks.entry(old).or_insert_with(|| {
            self.order.push(old);
            next
        })
    }

    /// The cut's frames and stacks, taken from `t`'s.
    #[allow(clippy::type_complexity)]
    fn tables(&self, t: &TensorTrace) -> (Vec<(String, u32, String)>, Vec<Vec<u32>>) {
        let mut frames: HashMap<u32, u32> = HashMap::new();
        let mut frame_list = Vec::new();
        let stacks = self
            .order
            .iter()
            .map(|&old| {
                let frames_of = t.stacks.get(old as usize).map_or(&[][..], Vec::as_slice);
                frames_of
                    .iter()
                    .filter_map(|&f| {
                        let frame = t.frames.get(f as usize)?;
                        Some(*frames.entry(f).or_insert_with(|| {
                            frame_list.push(frame.clone());
                            (frame_list.len() - 1) as u32
                        }))
                    })
                    .collect()
            })
            .collect();
        (frame_list, stacks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn event(action: Action, addr: u64, size: u64, stack: Option<u32>, t_ns: u64) -> TraceEvent {
        TraceEvent {
            action,
            addr,
            size,
            stack,
            t_ns: Some(t_ns),
        }
    }

    /// Before the region (t < 100): @model 10 MiB kept, @gone 4 MiB freed inside it. Inside
    /// (100..=200): @act 6 MiB freed inside, @kept 2 MiB kept. After: @late 1 MiB.
    fn trace() -> TensorTrace {
        use Action::*;
        let events = vec![
            event(SegmentAlloc, 0x1000_0000, 20 * MIB, None, 10),
            event(Alloc, 0xa, 10 * MIB, Some(0), 20),
            event(Alloc, 0xb, 4 * MIB, Some(1), 30),
            event(Alloc, 0xc, 6 * MIB, Some(2), 110),
            event(Free, 0xb, 4 * MIB, None, 120),
            event(Alloc, 0xd, 2 * MIB, Some(3), 130),
            event(Free, 0xc, 6 * MIB, None, 140),
            event(Alloc, 0xe, MIB, Some(4), 300),
        ];
        let frames = (0..5)
            .map(|i| ("/w/t.py".to_string(), 10 + i, "f".to_string()))
            .collect();
        TensorTrace {
            pid: 7,
            state: TraceState::Done,
            entries: 1000,
            frames,
            stacks: (0..5).map(|i| vec![i]).collect(),
            devices: vec![DeviceTrace {
                device: 0,
                live: vec![
                    (0xa, 10 * MIB, Some(0)),
                    (0xd, 2 * MIB, Some(3)),
                    (0xe, MIB, Some(4)),
                ],
                reserved: 20 * MIB,
                events,
                ..DeviceTrace::default()
            }],
            ..TensorTrace::default()
        }
    }

    #[test]
    fn a_cut_keeps_the_regions_events_and_makes_what_came_before_one_block_without_a_stack() {
        let t = trace();
        let index = TraceIndex::new(&t);
        assert_eq!(index.allocated_at(100), 14 * MIB);
        let cut = index.cut(100, 200);
        let d = &cut.devices[0];
        // @act, the free of @gone, @kept, the free of @act; times from the region's begin.
        assert_eq!(d.events.len(), 4);
        assert_eq!(d.events[0].t_ns, Some(10));
        // Live at the end: @kept, and @model as the block held from before.
        assert_eq!(
            d.live,
            vec![(0xd, 2 * MIB, Some(1)), (BEFORE, 10 * MIB, None)]
        );
        assert_eq!(d.reserved, 20 * MIB);
        // Only the stacks it uses, renumbered: @act's and @kept's.
        assert_eq!(cut.stacks, vec![vec![0], vec![1]]);
        assert_eq!(cut.frames[0].1, 12);
        assert_eq!(cut.frames[1].1, 13);
        // Replayed, the cut starts where the region began: 14 MiB, then peaks at 20 MiB
        // (@model, @gone and @act), with 10 MiB of it held from before.
        let replay = Replay::new(d);
        let start: u64 = replay.start.values().map(|b| b.0).sum();
        assert_eq!(start, 14 * MIB);
        assert!(replay.start.values().all(|b| b.1.is_none()));
    }

    #[test]
    fn a_block_from_before_replaced_without_a_free_leaves_the_cut_as_the_whole_replay() {
        let mut t = trace();
        // @late's block comes at @model's address, inside the region, with no free.
        t.devices[0].events[7] = event(Action::Alloc, 0xa, MIB, Some(4), 150);
        t.devices[0].live = vec![(0xd, 2 * MIB, Some(3)), (0xa, MIB, Some(4))];
        let index = TraceIndex::new(&t);
        let d = &index.cut(100, 200).devices[0];
        let replay = Replay::new(d);
        let start: u64 = replay.start.values().map(|b| b.0).sum();
        assert_eq!(start, 14 * MIB);
        // At the end: @kept and @late; of what came before, nothing.
        let end: u64 = d.live.iter().map(|b| b.1).sum();
        assert_eq!(end, 3 * MIB);
        assert_eq!(index.devices[0].level[8], 3 * MIB);
    }

    #[test]
    fn a_region_older_than_the_rings_oldest_event_is_not_cut() {
        let mut t = trace();
        t.entries = 8;
        let index = TraceIndex::new(&t);
        assert!(matches!(index.cut(5, 200).state, TraceState::Failed(_)));
        assert_eq!(index.allocated_at(5), 0);
        // A region after the oldest event kept is whole.
        assert_eq!(index.cut(100, 200).state, TraceState::Done);
        assert_eq!(index.allocated_at(100), 14 * MIB);
    }

    #[test]
    fn a_trace_without_times_or_not_read_is_not_cut() {
        let mut t = trace();
        t.devices[0].events[3].t_ns = None;
        let cut = TraceIndex::new(&t).cut(100, 200);
        assert!(matches!(cut.state, TraceState::Failed(_)));
        assert!(cut.devices.is_empty());
        assert_eq!(TraceIndex::new(&t).allocated_at(100), 0);
        let mut t = trace();
        t.state = TraceState::Recording;
        let cut = TraceIndex::new(&t).cut(100, 200);
        assert_eq!(cut.state, TraceState::Recording);
        assert!(cut.devices.is_empty());
    }
}
