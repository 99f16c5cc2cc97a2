//! Sampled allocations and copies → bytes at each place: allocated (and how much through
//! Python's allocator), copied, and held at the peak: live heap blocks and anonymous mappings
//! at the one instant the counted memory was highest ([`tree_peak`]). Pure.

use std::collections::HashMap;

use mlprof_wire::alloc_flags;

use super::filter::Filter;
use super::places::{place_of, Acc, Lines, Place, INTERPRETER, NATIVE_THREAD, OUTSIDE};
use super::pooljoin::{python_ancestor, Donor, PoolJoin};
use crate::recording::{Recording, Tick};

/// The tree's heap peak and the instant its holders are taken at.
pub struct TreePeak {
    /// Heap bytes: one process's exact peak, or the highest sampled sum of several.
    pub bytes: u64,
    /// Nanoseconds from launch of the instant lines' holdings are taken at: the heap peak's,
    /// unless heap and mapped memory together were higher at a collector tick.
    pub at_ns: u64,
    /// Nanoseconds from launch of the heap's own peak.
    pub heap_at_ns: u64,
    /// The image whose own heap peak that instant is, when it is one process's.
    pub image: Option<usize>,
    /// Share of each sampled mapping counted as held then: at a tick, the resident anonymous
    /// memory beside the heap over the bytes mapped, at most 1 (allocators map capacity they
    /// never touch; [`Tick::counted_bytes`]); at the heap's peak, none.
    pub mapped_share: f64,
}

/// Counted bytes at a tick must pass those at the heap peak by this share, and by
/// [`COUNTED_MARGIN_BYTES`], for the holders to be taken at the tick: mapped memory sets the
/// peak. (The resident memory that caps a tick's mapped bytes also holds the interpreter's and
/// libraries' own pages, 15-30 MiB with numpy: OpenBLAS's 64 MiB of barely touched buffers
/// would move a numpy program's holders to a tick by that much.)
const COUNTED_MARGIN: f64 = 0.10;
/// See [`COUNTED_MARGIN`].
const COUNTED_MARGIN_BYTES: u64 = 32 << 20;

/// The tree's peak: the largest image's exact heap peak, at its last peak mark (within 1% of
/// it: the instant its holders belong to; two peaks closer than that, as in a pandas job 0.2%
/// apart, name the first), unless processes overlapping in time held more together at a
/// tick (then that tick's time); and then, where mapped memory is most of what a program
/// holds (polars' bundled jemalloc), the tick at which heap and mapped memory together were
/// highest, when they were higher than at that instant.
pub fn tree_peak(rec: &Recording) -> TreePeak {
    let mut heap = heap_peak(rec);
    heap.heap_at_ns = heap.at_ns;
    let near = nearest_tick(&rec.ticks, heap.at_ns);
    let at_heap = heap.bytes + near.map_or(0, |t| capped_mapped(t, t.heap_bytes.max(heap.bytes)));
    let best = rec.ticks.iter().max_by_key(|t| t.counted_bytes());
    match best {
        Some(t)
            if t.counted_bytes() as f64 > at_heap as f64 * (1.0 + COUNTED_MARGIN)
                && t.counted_bytes() > at_heap + COUNTED_MARGIN_BYTES =>
        {
            TreePeak {
                at_ns: t.t_ns,
                image: None,
                mapped_share: share(t, t.heap_bytes),
                ..heap
            }
        }
        // The heap's peak: mappings are not held there. The share would come from a tick up
        // to 10 ms away, at a different heap, and it moved a matmul line's held bytes by a
        // few MiB from run to run (OpenBLAS's buffers, mapped and barely touched): where the
        // heap is the peak, the heap is what the lines hold.
        _ => TreePeak {
            mapped_share: 0.0,
            ..heap
        },
    }
}

/// Mapped bytes at `t` as far as the resident anonymous memory beside `heap` holds them.
fn capped_mapped(t: &Tick, heap: u64) -> u64 {
    t.mapped_bytes.min(t.anon_bytes.saturating_sub(heap))
}

/// The share of mapped bytes at `t` that counts (1 when nothing is mapped).
fn share(t: &Tick, heap: u64) -> f64 {
    match t.mapped_bytes {
        0 => 1.0,
        mapped => capped_mapped(t, heap) as f64 / mapped as f64,
    }
}

/// The tick closest in time to `at_ns`.
fn nearest_tick(ticks: &[Tick], at_ns: u64) -> Option<&Tick> {
    ticks.iter().min_by_key(|t| t.t_ns.abs_diff(at_ns))
}

/// The heap's own peak: the largest image's exact peak at its last mark, or the highest sum
/// of several at a tick.
fn heap_peak(rec: &Recording) -> TreePeak {
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
            heap_at_ns: 0,
            mapped_share: 1.0,
        },
        _ => TreePeak {
            bytes: sum_peak,
            at_ns: sum_at_ns,
            image: None,
            heap_at_ns: 0,
            mapped_share: 1.0,
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
/// Python threads were on then, as its CPU does (`pooljoin`); what a child allocates outside
/// any user code (a program without Python: the compilers torch.compile runs; a Python child
/// starting up) goes to the line its nearest Python ancestor was on then, where that
/// ancestor's CPU sample went (`donors`).
pub fn add(
    rec: &Recording,
    filter: &Filter,
    sample_places: &[Vec<Place>],
    donors: &[Vec<Donor>],
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
        let ancestor = python_ancestor(rec, ci).map(|ai| {
            let parent = PoolJoin::new(&rec.channels[ai].samples, &sample_places[ai]);
            (ai, parent)
        });
        // Allocations folded over their thread's run (`alloc_groups`) have no one moment and
        // stay where their frames put them (in a child without Python: at its start).
        let mut place_of = |frames: &[(u32, i32)], tid: u32, t_ns: Option<u64>| {
            let place = place_of(frames, tid, channel.pid, &mut lines, filter);
            let place = match t_ns.and_then(|t| join.at(t)) {
                Some(j) if place.file == NATIVE_THREAD => sample_places[ci][j].clone(),
                _ => place,
            };
            let outside = [OUTSIDE, INTERPRETER, NATIVE_THREAD].contains(&place.file.as_str());
            let Some((ai, parent)) = ancestor
                .as_ref()
                .filter(|_| channel.python.is_none() || outside)
            else {
                return place;
            };
            let t = match (t_ns, channel.python.is_none()) {
                (Some(t), _) => t,
                (None, true) => channel.start_ns,
                (None, false) => return place,
            };
            match parent.for_child(t, channel.start_ns) {
                Some(j) => match donors[*ai][j] {
                    Some((c, k)) => sample_places[c][k].clone(),
                    None => sample_places[*ai][j].clone(),
                },
                None => place,
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
        // Mappings: held at the same instant (at the tick's resident share), and mapped at
        // the process's own mapped peak (its last mapped mark), resident or not.
        let mapped_peak = channel.mapped.marks.last().map(|&(t, _)| t);
        for m in &channel.mapped.mappings {
            let held = peak_ns.is_some_and(|p| m.live_at(p));
            let mapped = mapped_peak.is_some_and(|p| m.live_at(p));
            if !held && !mapped {
                continue;
            }
            let place = place_of(&m.frames, m.tid, Some(m.t_ns));
            let acc = places.entry(place).or_default();
            if mapped {
                acc.mapped_peak_bytes += m.weight;
            }
            if held {
                acc.peak_bytes += (m.weight as f64 * tree.mapped_share).round() as u64;
            }
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
