//! The index the cuts of a recording's regions share: each list of events in time order, so
//! that a region's events are found by binary search instead of by scanning the whole run's
//! once per region.

use std::collections::HashMap;

use super::tensors::TraceIndex;
use crate::recording::{GpuFolded, Recording, Timed};

/// What the cuts of a recording's regions share, made once ([`Index::new`]): each list of
/// events in time order, so that a region's events are found by binary search instead of by
/// scanning the whole run's once per region.
pub struct Index<'a> {
    pub(super) rec: &'a Recording,
    /// Channels in start order.
    pub(super) by_start: Vec<usize>,
    /// Per channel.
    pub(super) channels: Vec<ChannelIndex>,
    pub(super) ticks: Order,
    /// The GPU polls.
    pub(super) gpu: Order,
    /// The allocator traces, replayed.
    pub(super) tensors: Vec<TraceIndex<'a>>,
}

/// One channel's lists in time order.
pub(super) struct ChannelIndex {
    pub(super) samples: Order,
    pub(super) allocs: Order,
    pub(super) copies: Order,
    pub(super) peak_marks: Order,
    /// Its regions by begin.
    pub(super) regions: Order,
    /// Its CUDA allocations.
    pub(super) gpu_allocs: Order,
    /// Its rows of CUDA copies and of launches, by their first call.
    pub(super) gpu_copies: Order,
    pub(super) gpu_launches: Order,
    /// Its rows of kernels of sampled launches, by their first launch.
    pub(super) gpu_kernels: Order,
    /// Its code objects by file (for the lines of allocator traces), only when a trace exists.
    pub(super) codes_by_file: HashMap<String, Vec<u32>>,
}

impl<'a> Index<'a> {
    /// Index `rec` (n log n in its events).
    pub fn new(rec: &'a Recording) -> Index<'a> {
        let mut by_start: Vec<usize> = (0..rec.channels.len()).collect();
        by_start.sort_by_key(|&i| rec.channels[i].start_ns);
        let channels = rec
            .channels
            .iter()
            .map(|c| ChannelIndex {
                samples: Order::new(c.samples.iter().map(|e| e.t_ns)),
                allocs: Order::new(c.allocs.iter().map(|e| e.t_ns)),
                copies: Order::new(c.copies.iter().map(|e| e.t_ns)),
                peak_marks: Order::new(c.peak_marks.iter().map(|m| m.0)),
                regions: Order::new(c.regions.iter().map(|r| r.begin_ns)),
                gpu_allocs: Order::new(c.gpu_calls.allocs.iter().map(|a| a.t_ns)),
                gpu_copies: Order::new(c.gpu_calls.copies.iter().map(|r| r.first_ns)),
                gpu_launches: Order::new(c.gpu_calls.launches.iter().map(|r| r.first_ns)),
                gpu_kernels: Order::new(c.gpu_calls.kernels.sampled.iter().map(|r| r.first_ns)),
                codes_by_file: match rec.gpu_tensors.iter().any(|t| t.pid == c.pid) {
                    true => codes_by_file(c),
                    false => HashMap::new(),
                },
            })
            .collect();
        Index {
            rec,
            by_start,
            channels,
            ticks: Order::new(rec.ticks.iter().map(|t| t.t_ns)),
            gpu: Order::new(rec.gpu.polls.iter().map(|p| p.t_ns)),
            tensors: rec.gpu_tensors.iter().map(TraceIndex::new).collect(),
        }
    }
}

fn codes_by_file(c: &crate::recording::ChannelSummary) -> HashMap<String, Vec<u32>> {
    let mut by_file: HashMap<String, Vec<u32>> = HashMap::new();
    for (id, code) in &c.codes {
        by_file.entry(code.filename.clone()).or_default().push(*id);
    }
    by_file
}

/// The times of a list's items, sorted, and where each sorted time is in the list (none when
/// the list is in time order already, as it usually is).
pub(super) struct Order {
    times: Vec<u64>,
    at: Option<Vec<usize>>,
}

impl Order {
    pub(super) fn new(times: impl Iterator<Item = u64>) -> Order {
        let times: Vec<u64> = times.collect();
        if times.is_sorted() {
            return Order { times, at: None };
        }
        let mut at: Vec<usize> = (0..times.len()).collect();
        at.sort_by_key(|&i| times[i]);
        Order {
            times: at.iter().map(|&i| times[i]).collect(),
            at: Some(at),
        }
    }

    /// Where in the list the items timed from `from` to `to` (inclusive) are, in list order.
    pub(super) fn between(&self, from: u64, to: u64) -> Vec<usize> {
        let lo = self.times.partition_point(|&t| t < from);
        let hi = self.times.partition_point(|&t| t <= to).max(lo);
        match &self.at {
            None => (lo..hi).collect(),
            Some(at) => {
                let mut found = at[lo..hi].to_vec();
                found.sort_unstable();
                found
            }
        }
    }

    /// The events of `events` (the list this was made from) from `from` to `to`, as
    /// [`crate::recording::between`] cuts them.
    pub(super) fn cut<T: Timed>(&self, events: &[T], from: u64, to: u64) -> Vec<T> {
        self.between(from, to)
            .into_iter()
            .map(|i| events[i].cut(from, to))
            .collect()
    }

    /// The rows of `rows` (the list this was made from, by first call) whose calls were all
    /// made from `from` to `to`, their times counted from `from`.
    pub(super) fn whole<R: GpuFolded>(&self, rows: &[R], from: u64, to: u64) -> Vec<R> {
        self.between(from, to)
            .into_iter()
            .map(|i| &rows[i])
            .filter(|r| r.within(from, to))
            .map(|r| r.shifted(from))
            .collect()
    }
}
