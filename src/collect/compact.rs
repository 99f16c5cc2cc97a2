//! Keeping a channel's decoded events bounded on runs of any length (see
//! `docs/design/bounded-collector.md`).
//!
//! Events older than [`HORIZON_NS`] of the channel's own time are merged into windows of
//! [`window_ns`] (a power of two that grows with the run, so that a run of any length has at
//! most about [`WINDOWS`] of them):
//! - CPU samples of one thread with the same flags, instruction pointer and frames in one
//!   window become one sample at the window's start, their weights added. Instruction pointers
//!   in the interpreter (where only the class matters, not the function) are first replaced by
//!   the start of their mapping.
//! - Copies of one thread with the same frames in one window become one, bytes added.
//! - Sampled allocations freed before the horizon are folded into one [`AllocGroup`] per
//!   thread, flags and frames: counts, bytes, first and last allocation time, the bytes that
//!   were live at the process's current heap peak, and the live-bytes changes per window.
//!   Blocks still live stay as they are: their number is bounded by the preload library's
//!   live-set table.
//!
//! So memory grows with the number of distinct stacks, threads and windows, not with time.
//! The horizon leaves recent events exact; a peak mark, which may arrive a little after frees
//! that followed it in time, always arrives before the horizon passes them.

use std::collections::HashMap;

use mlprof_wire::sample_flags;

use super::events::Events;
use crate::recording::{AllocGroup, AllocSample};

/// Events this much younger than the newest one are left as they are: recent data stays
/// exact, and a peak mark delayed by its thread's scheduling (up to several CPU-quota
/// throttling periods of 100 ms) still arrives before the frees that followed it are folded.
/// Held events grow with the event rate times this: shorter is smaller.
pub const HORIZON_NS: u64 = 500_000_000;
/// Windows over a run, at most (the width doubles as the run grows past them).
pub const WINDOWS: u64 = 1024;
/// Narrowest window: 2^24 ns, about 17 ms (the collector ticks every 20 ms).
pub const MIN_WINDOW_NS: u64 = 1 << 24;

/// The window width for a run that has lasted `t_ns`: a power of two, at least
/// [`MIN_WINDOW_NS`], at most `t_ns / WINDOWS` rounded up.
pub fn window_ns(t_ns: u64) -> u64 {
    MIN_WINDOW_NS.max((t_ns / WINDOWS).next_power_of_two())
}

/// Merge `all`'s events older than the horizon of `newest_ns` into windows. `canon` maps an
/// instruction pointer to the one that stands for it (see the module doc).
pub fn compact(all: &mut Events, newest_ns: u64, canon: &mut dyn FnMut(u64) -> u64) {
    let width = window_ns(newest_ns).max(all.window_ns);
    all.window_ns = width;
    let cutoff = newest_ns.saturating_sub(HORIZON_NS) / width * width;
    compact_samples(all, width, cutoff, canon);
    compact_copies(all, width, cutoff);
    fold_allocs(all, width, cutoff);
}

fn compact_samples(all: &mut Events, width: u64, cutoff: u64, canon: &mut dyn FnMut(u64) -> u64) {
    let (mut old, recent): (Vec<_>, Vec<_>) = std::mem::take(&mut all.samples)
        .into_iter()
        .partition(|s| s.t_ns < cutoff);
    for s in &mut old {
        s.t_ns = s.t_ns / width * width;
        s.ip = canon(s.ip);
    }
    old.sort_unstable_by(|a, b| {
        (a.t_ns, a.tid, a.flags, a.ip, &a.frames).cmp(&(b.t_ns, b.tid, b.flags, b.ip, &b.frames))
    });
    let mut merged = 0u64;
    old.dedup_by(|next, kept| {
        let same = (next.t_ns, next.tid, next.flags, next.ip, &next.frames)
            == (kept.t_ns, kept.tid, kept.flags, kept.ip, &kept.frames);
        if same {
            kept.weight_ns = kept.weight_ns.saturating_add(next.weight_ns);
            merged += u64::from(next.flags & sample_flags::WAITING == 0);
        }
        same
    });
    all.merged_cpu_samples += merged;
    old.extend(recent);
    all.samples = old;
}

fn compact_copies(all: &mut Events, width: u64, cutoff: u64) {
    let (mut old, recent): (Vec<_>, Vec<_>) = std::mem::take(&mut all.copies)
        .into_iter()
        .partition(|c| c.t_ns < cutoff);
    for c in &mut old {
        c.t_ns = c.t_ns / width * width;
    }
    old.sort_unstable_by(|a, b| (a.t_ns, a.tid, &a.frames).cmp(&(b.t_ns, b.tid, &b.frames)));
    old.dedup_by(|next, kept| {
        let same = (next.t_ns, next.tid, &next.frames) == (kept.t_ns, kept.tid, &kept.frames);
        if same {
            kept.bytes = kept.bytes.saturating_add(next.bytes);
            kept.weight = kept.weight.saturating_add(next.weight);
        }
        same
    });
    old.extend(recent);
    all.copies = old;
}

/// What allocations are grouped by: thread, flags, frames.
type GroupKey = (u32, u32, Vec<(u32, i32)>);

/// Fold allocations freed before `cutoff` into groups; re-window the groups' changes.
fn fold_allocs(all: &mut Events, width: u64, cutoff: u64) {
    let peak = all.peak_marks.last().map(|&(t, _)| t);
    let marks = all.peak_marks.len();
    let mut index: HashMap<GroupKey, usize> = all
        .alloc_groups
        .iter()
        .enumerate()
        .map(|(i, g)| ((g.tid, g.flags, g.frames.clone()), i))
        .collect();
    let mut kept: Vec<AllocSample> = Vec::new();
    for a in std::mem::take(&mut all.allocs) {
        let Some(freed) = a.freed_ns.filter(|&f| f < cutoff) else {
            kept.push(a);
            continue;
        };
        let key = (a.tid, a.flags, a.frames);
        let i = match index.get(&key) {
            Some(&i) => i,
            None => {
                // A new group: its frames are copied once, for the index.
                all.alloc_groups.push(AllocGroup {
                    tid: key.0,
                    flags: key.1,
                    frames: key.2.clone(),
                    first_ns: a.t_ns,
                    ..AllocGroup::default()
                });
                index.insert(key, all.alloc_groups.len() - 1);
                all.alloc_groups.len() - 1
            }
        };
        let g = &mut all.alloc_groups[i];
        g.count += 1;
        g.weight = g.weight.saturating_add(a.weight);
        g.first_ns = g.first_ns.min(a.t_ns);
        g.last_ns = g.last_ns.max(a.t_ns);
        if g.peak_marks != marks {
            // Every block folded before the newest peak mark was freed before it.
            (g.peak_marks, g.held_at_peak) = (marks, 0);
        }
        if peak.is_some_and(|p| a.t_ns <= p && freed > p) {
            g.held_at_peak = g.held_at_peak.saturating_add(a.weight);
        }
        let (from, to) = (a.t_ns / width * width, freed / width * width);
        if from != to {
            let w = a.weight.min(i64::MAX as u64) as i64;
            g.changes.push((from, w));
            g.changes.push((to, -w));
        }
    }
    all.allocs = kept;
    for g in &mut all.alloc_groups {
        for change in &mut g.changes {
            change.0 = change.0 / width * width;
        }
        g.changes.sort_unstable_by_key(|c| c.0);
        g.changes.dedup_by(|next, kept| {
            let same = next.0 == kept.0;
            if same {
                kept.1 = kept.1.saturating_add(next.1);
            }
            same
        });
        g.changes.retain(|c| c.1 != 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{CopySample, CpuSample};

    const MS: u64 = 1_000_000;

    fn sample(t_ms: u64, ip: u64, frames: Vec<(u32, i32)>) -> CpuSample {
        CpuSample {
            t_ns: t_ms * MS,
            tid: 7,
            ip,
            weight_ns: 10 * MS,
            flags: 0,
            frames,
            caller: 0,
            fault_ns: 0,
        }
    }

    fn alloc(t_ms: u64, freed_ms: Option<u64>, line: i32) -> AllocSample {
        AllocSample {
            t_ns: t_ms * MS,
            tid: 7,
            addr: t_ms,
            size: 100,
            weight: 1 << 20,
            flags: 0,
            frames: vec![(1, line)],
            freed_ns: freed_ms.map(|f| f * MS),
            cut_ns: None,
        }
    }

    #[test]
    fn windows_grow_with_the_run_and_stay_powers_of_two() {
        assert_eq!(window_ns(0), MIN_WINDOW_NS);
        assert_eq!(window_ns(10_000_000_000), MIN_WINDOW_NS);
        let day = 86_400_000_000_000;
        let w = window_ns(day);
        assert!(w.is_power_of_two());
        assert!(day / w <= WINDOWS && day / w > WINDOWS / 2, "{}", day / w);
    }

    #[test]
    fn old_samples_merge_per_window_and_recent_ones_stay_exact() {
        let mut all = Events::default();
        // 100 s of samples every 10 ms at two lines, the interpreter's ips varying.
        for i in 0..10_000u64 {
            all.samples
                .push(sample(i * 10, 0x1000 + i % 50, vec![(1, (i % 2) as i32)]));
        }
        let total: u64 = all.samples.iter().map(|s| s.weight_ns).sum();
        compact(&mut all, 100_000 * MS, &mut |ip| ip & !0xfff);
        assert_eq!(all.samples.iter().map(|s| s.weight_ns).sum::<u64>(), total);
        let w = window_ns(100_000 * MS);
        let cutoff = (100_000 * MS - HORIZON_NS) / w * w;
        let old: Vec<&CpuSample> = all.samples.iter().filter(|s| s.t_ns < cutoff).collect();
        assert!(old.iter().all(|s| s.t_ns % w == 0 && s.ip == 0x1000));
        assert_eq!(
            old.len() as u64,
            2 * cutoff / w,
            "one sample per line and window"
        );
        let recent = all.samples.len() - old.len();
        assert_eq!(recent as u64, (100_000 * MS - cutoff) / (10 * MS));
        assert!(all.samples.windows(2).all(|p| p[0].t_ns <= p[1].t_ns));
        // Compacting again changes nothing.
        let before = all.samples.clone();
        compact(&mut all, 100_000 * MS, &mut |ip| ip & !0xfff);
        assert_eq!(all.samples, before);
    }

    #[test]
    fn copies_merge_and_keep_their_bytes() {
        let mut all = Events::default();
        for i in 0..1000u64 {
            all.copies.push(CopySample {
                t_ns: i * 10 * MS,
                tid: 7,
                bytes: 10,
                weight: 1000,
                frames: vec![(1, 2)],
            });
        }
        compact(&mut all, 60_000 * MS, &mut |ip| ip);
        let windows = 10_000 * MS / window_ns(60_000 * MS) + 1;
        assert!(all.copies.len() as u64 <= windows, "{}", all.copies.len());
        assert_eq!(all.copies.iter().map(|c| c.weight).sum::<u64>(), 1_000_000);
        assert_eq!(all.copies.iter().map(|c| c.bytes).sum::<u64>(), 10_000);
    }

    #[test]
    fn freed_allocations_fold_into_groups_that_remember_what_was_held_at_the_peak() {
        let mut all = Events::default();
        // Line 1: temporaries freed 5 ms later. Line 2: kept forever. Line 3: allocated
        // before the peak at 30 s and freed after it.
        for i in 0..2000u64 {
            all.allocs.push(alloc(i * 20 + 1, Some(i * 20 + 6), 1));
        }
        for i in 0..10u64 {
            all.allocs.push(alloc(i * 1000, None, 2));
        }
        all.allocs.push(alloc(29_000, Some(31_000), 3));
        all.peak_marks.push((30_000 * MS, 1 << 30));
        compact(&mut all, 60_000 * MS, &mut |ip| ip);
        assert_eq!(all.allocs.len(), 10, "only the live blocks stay");
        assert!(all.allocs.iter().all(|a| a.freed_ns.is_none()));
        let group = |line: i32| {
            all.alloc_groups
                .iter()
                .find(|g| g.frames == vec![(1, line)])
                .expect("a group")
        };
        let temps = group(1);
        assert!(temps.count > 1800 && temps.count <= 2000);
        assert_eq!(temps.weight, temps.count << 20);
        assert_eq!(temps.held_at_peak, 0);
        assert_eq!(temps.peak_marks, 1);
        let windows = (60_000 * MS / window_ns(60_000 * MS)) as usize;
        assert!(
            temps.changes.len() <= windows,
            "at most one change per window: {} changes",
            temps.changes.len()
        );
        assert_eq!(temps.changes.iter().map(|c| c.1).sum::<i64>(), 0);
        let held = group(3);
        assert_eq!((held.count, held.held_at_peak), (1, 1 << 20));
        assert_eq!(held.changes.iter().map(|c| c.1).sum::<i64>(), 0);
        assert_eq!(held.changes.len(), 2);

        // A higher peak later: what was folded was freed before it.
        all.peak_marks.push((59_000 * MS, 2 << 30));
        all.allocs.push(alloc(59_500, Some(59_600), 4));
        compact(&mut all, 120_000 * MS, &mut |ip| ip);
        let held = all
            .alloc_groups
            .iter()
            .find(|g| g.frames == vec![(1, 3)])
            .expect("a group");
        assert_ne!(held.peak_marks, all.peak_marks.len());
    }
}
