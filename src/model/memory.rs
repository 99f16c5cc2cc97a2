//! Sampled allocations and copies → bytes at each place: allocated (and how much through
//! Python's allocator), live at the heap peak, copied; anonymous mappings held at their own
//! peak. The peak moment of a process is its
//! last peak mark (the heap's highest point, to within 1%). Pure.

use std::collections::HashMap;

use mlprof_wire::alloc_flags;

use super::filter::Filter;
use super::places::{place_of, Acc, Lines, Place, NATIVE_THREAD};
use super::pooljoin::PoolJoin;
use crate::recording::Recording;

/// The tree's heap peak and the instant its holders are taken at.
pub struct TreePeak {
    /// Bytes: one process's exact peak, or the highest sampled sum of several.
    pub bytes: u64,
    /// Nanoseconds from launch.
    pub at_ns: u64,
    /// The image whose own peak it is, when it is one process's.
    pub image: Option<usize>,
}

/// The tree's peak: the largest image's exact peak, at its last peak mark (within 1% of
/// it: the instant its holders belong to; two peaks closer than that, as in a pandas job 0.2%
/// apart, name the first), unless processes overlapping in time held more together at a
/// tick (then that tick's time).
pub fn tree_peak(rec: &Recording) -> TreePeak {
    let (sum_peak, sum_at_ns) = rec.ticks.iter().fold((0, 0), |best, t| {
        if t.heap_bytes > best.0 {
            (t.heap_bytes, t.t_ns)
        } else {
            best
        }
    });
    let top = rec
        .channels
        .iter()
        .enumerate()
        .max_by_key(|(_, c)| c.heap_peak);
    match top {
        Some((i, image)) if image.heap_peak.max(0) as u64 >= sum_peak => TreePeak {
            bytes: image.heap_peak.max(0) as u64,
            at_ns: image
                .peak_marks
                .last()
                .map_or(image.heap_peak_seen_ns, |&(t, _)| t),
            image: Some(i),
        },
        _ => TreePeak {
            bytes: sum_peak,
            at_ns: sum_at_ns,
            image: None,
        },
    }
}

/// Add every sampled allocation and copy of the recording to `places`. What each line holds
/// at the peak is taken at the tree's peak instant ([`tree_peak`]): the peak's own process at
/// its last peak mark, every other process alive then at that instant, processes not alive
/// then not at all (torch.compile's dozens of short compiler processes each counted their own
/// peak: 1.5 GiB held for a 598 MiB peak). `sample_places` is
/// where each CPU sample went by its own frames (`cpu::places`): what a thread without Python
/// (a rayon, OpenMP or BLAS pool) allocates, maps or copies goes to the line the process's
/// Python threads were on then, as its CPU does (`pooljoin`).
pub fn add(
    rec: &Recording,
    filter: &Filter,
    sample_places: &[Vec<Place>],
    places: &mut HashMap<Place, Acc>,
) {
    let tree = tree_peak(rec);
    for (ci, channel) in rec.channels.iter().enumerate() {
        let mut lines = Lines::new(rec, ci);
        let own_peak = tree.image == Some(ci);
        let alive =
            channel.start_ns <= tree.at_ns && channel.exit_ns.is_none_or(|e| e > tree.at_ns);
        let peak_ns = match own_peak {
            true => channel.peak_marks.last().map(|&(t, _)| t),
            false => alive.then_some(tree.at_ns),
        };
        let join = PoolJoin::new(&channel.samples, &sample_places[ci]);
        // Allocations folded over their thread's run (`alloc_groups`) have no one moment and
        // stay where their frames put them.
        let mut place_of = |frames: &[(u32, i32)], tid: u32, t_ns: Option<u64>| {
            let place = place_of(frames, tid, channel.pid, &mut lines, filter);
            match t_ns.and_then(|t| join.at(t)) {
                Some(j) if place.file == NATIVE_THREAD => sample_places[ci][j].clone(),
                _ => place,
            }
        };

        for a in &channel.allocs {
            let live_at_peak =
                peak_ns.is_some_and(|p| a.t_ns <= p && a.freed_ns.is_none_or(|f| f > p));
            let acc = allocated(
                places,
                place_of(&a.frames, a.tid, Some(a.t_ns)),
                a.weight,
                a.flags,
            );
            if live_at_peak {
                acc.peak_bytes += a.weight;
                acc.peak_blocks += a.weight as f64 / a.size.max(1) as f64;
            }
            acc.blocks.block(a.t_ns, a.freed_ns, a.weight);
        }
        for g in &channel.alloc_groups {
            let acc = allocated(places, place_of(&g.frames, g.tid, None), g.weight, g.flags);
            // What the group held at its process's own peak counts only if no peak mark came
            // after it was computed; at another instant, its changes up to then.
            if own_peak && g.peak_marks == channel.peak_marks.len() {
                acc.peak_bytes += g.held_at_peak;
            } else if let (false, Some(at)) = (own_peak, peak_ns) {
                let held: i64 = g.changes.iter().filter(|c| c.0 <= at).map(|c| c.1).sum();
                acc.peak_bytes += held.max(0) as u64;
            }
            acc.blocks.group(g);
        }
        for m in channel.mapped.held_at_peak() {
            let place = place_of(&m.frames, m.tid, Some(m.t_ns));
            places.entry(place).or_default().mapped_peak_bytes += m.weight;
        }
        for c in &channel.copies {
            let place = place_of(&c.frames, c.tid, Some(c.t_ns));
            places.entry(place).or_default().copy_bytes += c.weight;
        }
    }
}

/// The accumulator of `place`, with `weight` allocated bytes (Python's when `flags` say so)
/// added.
fn allocated(places: &mut HashMap<Place, Acc>, place: Place, weight: u64, flags: u32) -> &mut Acc {
    let acc = places.entry(place).or_default();
    acc.alloc_bytes += weight;
    if flags & alloc_flags::PYTHON != 0 {
        acc.alloc_python_bytes += weight;
    }
    acc
}
