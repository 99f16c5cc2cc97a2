//! CPU samples → time at each place. Each sample goes to the innermost frame in a profiled
//! file (the user's code by default), and is Python time or native time by where the
//! interrupted instruction was; off-CPU samples are waiting time. Pure: native names are
//! resolved beforehand.

use std::collections::{BTreeMap, HashMap};

use mlprof_wire::sample_flags;

use super::filter::Filter;
use super::places::{place_of, Acc, Lines, Place, NATIVE_THREAD};
use super::profile::ThreadStats;
use crate::collect::{CpuSample, Recording};
use crate::symbolize::native::{CodeClass, Resolved};

/// Native names of sampled instruction pointers, by (channel index, ip).
pub type NativeNames = HashMap<(usize, u64), Resolved>;

/// Add every CPU sample of the recording to `places`; returns time per thread.
pub fn add(
    rec: &Recording,
    natives: &NativeNames,
    filter: &Filter,
    places: &mut HashMap<Place, Acc>,
    gpu: &mut super::gpu::Joiner,
) -> Vec<ThreadStats> {
    let mut threads: BTreeMap<(u32, u32), ThreadStats> = BTreeMap::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        let mut lines = Lines::new(rec, ci);
        let mut placed: Vec<Place> = channel
            .samples
            .iter()
            .map(|s| place_of(&s.frames, s.tid, channel.pid, &mut lines, filter))
            .collect();
        attribute_native_threads(&channel.samples, &mut placed);
        for (sample, place) in channel.samples.iter().zip(placed) {
            let kind = classify(sample, natives.get(&(ci, sample.ip)));
            let thread = threads
                .entry((channel.pid, sample.tid))
                .or_insert_with(|| ThreadStats {
                    pid: channel.pid,
                    tid: sample.tid,
                    ..ThreadStats::default()
                });
            thread.python |= !sample.frames.is_empty();
            let acc = places.entry(place.clone()).or_default();
            gpu.observe(channel.pid, sample.t_ns, sample.weight_ns, &place, acc);
            match kind {
                Time::Waiting => {
                    acc.system_ns += sample.weight_ns;
                    thread.cpu_system_s += sample.weight_ns as f64 / 1e9;
                }
                Time::Python => {
                    acc.python_ns += sample.weight_ns;
                    thread.cpu_python_s += sample.weight_ns as f64 / 1e9;
                }
                Time::Native(symbol, library) => {
                    acc.native_ns += sample.weight_ns;
                    thread.cpu_native_s += sample.weight_ns as f64 / 1e9;
                    *acc.natives.entry((symbol, library)).or_default() += sample.weight_ns;
                }
            }
        }
    }
    threads.into_values().collect()
}

/// What kind of time a sample is.
enum Time {
    Waiting,
    Python,
    Native(String, String),
}

fn classify(sample: &CpuSample, named: Option<&Resolved>) -> Time {
    if sample.flags & sample_flags::WAITING != 0 {
        return Time::Waiting;
    }
    match named {
        Some(r) if r.class == CodeClass::Interpreter => Time::Python,
        Some(r) => Time::Native(
            r.symbol
                .clone()
                .unwrap_or_else(|| format!("{:#x}", sample.ip)),
            r.library.clone(),
        ),
        None => Time::Native("?".to_string(), "?".to_string()),
    }
}

/// How far apart a native-thread sample and Python-thread samples may be to be joined.
const JOIN_WINDOW_NS: u64 = 25_000_000;

/// Samples of threads without Python (BLAS and OpenMP pools) go to the line the process's
/// Python threads were on at that moment, when all of their samples within
/// [`JOIN_WINDOW_NS`] agree on one line: that line is waiting for the pool. Otherwise they
/// stay on [`NATIVE_THREAD`].
fn attribute_native_threads(samples: &[CpuSample], placed: &mut [Place]) {
    let mut python: Vec<(u64, usize)> = samples
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.frames.is_empty())
        .map(|(i, s)| (s.t_ns, i))
        .collect();
    python.sort_unstable();
    for i in 0..samples.len() {
        if placed[i].file != NATIVE_THREAD {
            continue;
        }
        let t = samples[i].t_ns;
        let from = python.partition_point(|&(pt, _)| pt + JOIN_WINDOW_NS < t);
        let near = python[from..]
            .iter()
            .take_while(|&&(pt, _)| pt <= t + JOIN_WINDOW_NS);
        let mut unique: Option<&Place> = None;
        let mut agreed = true;
        for &(_, j) in near {
            match unique {
                None => unique = Some(&placed[j]),
                Some(p) if *p == placed[j] => {}
                Some(_) => agreed = false,
            }
        }
        if let (Some(p), true) = (unique, agreed) {
            placed[i] = p.clone();
        }
    }
}
