//! The footprint timeline: collector ticks reduced to at most a few thousand points, merging
//! neighbours and keeping the maximum of each, so peaks are never smoothed away; the same for
//! the GPU memory held through CUDA calls (`gpu_held`); and the CPU timeline.

use mlprof_wire::sample_flags;

use super::profile::{CpuSample, MemorySample};
use crate::recording::{Recording, Tick};
use crate::symbolize::NativeNames;

/// Most buckets in the CPU timeline.
pub const CPU_BUCKETS: usize = 400;

/// CPU time per bucket of at least 20 ms, at most [`CPU_BUCKETS`] buckets over the run. When
/// the collector merged old samples into windows, a bucket is a whole number of windows (else
/// buckets would get one window or two in turn).
pub fn cpu(rec: &Recording, natives: &NativeNames, counted: &[Vec<u64>]) -> Vec<CpuSample> {
    let mut span_ns = (rec.wall_ns / CPU_BUCKETS as u64).max(20_000_000);
    if let Some(window) = rec
        .channels
        .iter()
        .map(|c| c.window_ns)
        .max()
        .filter(|&w| w > 0)
    {
        span_ns = span_ns.div_ceil(window) * window;
    }
    let n = (rec.wall_ns / span_ns + 1) as usize;
    let mut out: Vec<CpuSample> = (0..n)
        .map(|i| CpuSample {
            t_s: (i as u64 * span_ns) as f64 / 1e9,
            span_s: span_ns as f64 / 1e9,
            ..CpuSample::default()
        })
        .collect();
    for (ci, channel) in rec.channels.iter().enumerate() {
        for (s, &weight) in channel.samples.iter().zip(&counted[ci]) {
            let Some(b) = out.get_mut((s.t_ns / span_ns) as usize) else {
                continue;
            };
            let secs = weight as f64 / 1e9;
            let faults = s.fault_ns.min(weight) as f64 / 1e9;
            if s.flags & (sample_flags::WAITING | sample_flags::GPU_WAIT) != 0 {
                b.waiting_s += secs;
                continue;
            }
            b.kernel_s += faults;
            let secs = secs - faults;
            if super::cpu::python_time(s, channel.pid, natives.get(&(ci, s.ip)), &channel.maps) {
                b.python_s += secs;
            } else {
                b.native_s += secs;
            }
        }
    }
    if out
        .iter()
        .all(|b| b.python_s + b.native_s + b.kernel_s + b.waiting_s == 0.0)
    {
        out.clear();
    }
    out
}

/// Most points a profile's timeline holds.
pub const MAX_POINTS: usize = 2000;

/// Reduce `ticks` to at most `max_points` samples (time of the first tick of each bucket,
/// maximum heap and RSS within it).
pub fn build(ticks: &[Tick], max_points: usize) -> Vec<MemorySample> {
    let max_points = max_points.max(1);
    let per_bucket = ticks.len().div_ceil(max_points).max(1);
    ticks
        .chunks(per_bucket)
        .map(|bucket| MemorySample {
            t_s: bucket[0].t_ns as f64 / 1e9,
            heap_bytes: bucket.iter().map(|t| t.heap_bytes).max().unwrap_or(0),
            rss_bytes: bucket.iter().map(|t| t.rss_bytes).max().unwrap_or(0),
            mapped_bytes: bucket.iter().map(|t| t.mapped_bytes).max().unwrap_or(0),
        })
        .collect()
}

/// Most points of a device's timeline of memory held through CUDA calls.
pub const GPU_POINTS: usize = 500;

/// Reduce `points` (time, bytes from then on; in time order) to at most `max_points`: the last
/// point as it is (what was held at the end), the others merged into runs of neighbours, each
/// run kept as its highest at the first time it was reached. So the highest point and its time
/// survive any reduction, and so does the end.
pub fn highs(points: &[(u64, u64)], max_points: usize) -> Vec<(u64, u64)> {
    let max_points = max_points.max(2);
    let Some((last, rest)) = points.split_last() else {
        return Vec::new();
    };
    let per_bucket = rest.len().div_ceil(max_points - 1).max(1);
    let mut out: Vec<(u64, u64)> = rest
        .chunks(per_bucket)
        .map(|bucket| {
            let mut best = bucket[0];
            for &p in &bucket[1..] {
                if p.1 > best.1 {
                    best = p;
                }
            }
            best
        })
        .collect();
    out.push(*last);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(t: u64, heap: u64) -> Tick {
        Tick {
            t_ns: t * 10_000_000,
            heap_bytes: heap,
            rss_bytes: heap * 2,
            mapped_bytes: 0,
            anon_bytes: 0,
        }
    }

    #[test]
    fn short_runs_keep_every_tick() {
        let ticks: Vec<Tick> = (0..5).map(|i| tick(i, i * 10)).collect();
        let out = build(&ticks, 2000);
        assert_eq!(out.len(), 5);
        assert_eq!(out[3].heap_bytes, 30);
        assert!((out[3].t_s - 0.03).abs() < 1e-12);
    }

    #[test]
    fn gpu_highs_keep_every_point_of_a_short_series() {
        let pts = [(1, 10), (2, 30), (5, 20)];
        assert_eq!(highs(&pts, GPU_POINTS), pts.to_vec());
        assert_eq!(highs(&[], GPU_POINTS), Vec::new());
    }

    #[test]
    fn gpu_highs_are_bounded_and_keep_the_peak_its_time_and_the_end() {
        // A sawtooth with one spike; the end below everything before it.
        let mut pts: Vec<(u64, u64)> = (0..100_000).map(|i| (i * 7, 100 + i % 13)).collect();
        pts[54_321].1 = 1_000_000;
        pts.push((800_000, 3));
        let out = highs(&pts, GPU_POINTS);
        assert!(out.len() <= GPU_POINTS, "{}", out.len());
        let top = out.iter().max_by_key(|p| p.1).unwrap();
        assert_eq!(*top, (54_321 * 7, 1_000_000));
        assert_eq!(out.last(), Some(&(800_000, 3)));
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn long_runs_are_bounded_and_keep_the_spike() {
        let mut ticks: Vec<Tick> = (0..100_000).map(|i| tick(i, 100)).collect();
        ticks[54_321].heap_bytes = 1_000_000;
        let out = build(&ticks, 2000);
        assert!(out.len() <= 2000);
        assert_eq!(out.iter().map(|s| s.heap_bytes).max(), Some(1_000_000));
        assert_eq!(out.iter().map(|s| s.rss_bytes).max(), Some(200));
    }
}
