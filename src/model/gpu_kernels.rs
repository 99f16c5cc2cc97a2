//! Kernel time (CUPTI's account, `recording::GpuKernels`) → a line's "GPU time": the device
//! time of every kernel of a name (exact) shared among the lines whose sampled launches ran
//! kernels of that name, in proportion to what those samples stand for (a ratio estimator: a
//! name launched from one line is that line's exactly, and the first launch of every kernel is
//! sampled), with the kernels that took most of it by name; and each process's exact totals,
//! what no sampled launch accounts for, and the trace's state in words. Pure. See
//! docs/design/gpu-kernel-time.md.

use std::collections::HashMap;

use mlprof_wire::gpu_trace;

use super::profile::{GpuLineCalls, KernelShare, ProcessKernels};
use crate::recording::GpuKernels;

/// Kernels named under a line.
const LINE_TOP: usize = 5;
/// Kernels named for a process.
const PROCESS_TOP: usize = 10;

/// Each sampled kernel row of `k`: its launch's thread, stack and first time, its figures for
/// the line (its share of its name's exact totals), and its name with device nanoseconds and
/// count.
pub fn rows(
    k: &GpuKernels,
) -> impl Iterator<Item = (&[(u32, i32)], u32, u64, GpuLineCalls, Named)> {
    let sampled = sampled_sums(k);
    let exact: HashMap<(u32, u32), (u64, u64)> = k
        .all
        .iter()
        .map(|s| ((s.device, s.name), (s.device_ns, s.kernels)))
        .collect();
    k.sampled.iter().map(move |r| {
        let key = (r.device, r.name);
        let (ns, n) = exact.get(&key).copied().unwrap_or_default();
        let (sampled_ns, sampled_n) = sampled.get(&key).copied().unwrap_or_default();
        let share = |part: u64, of: u64, total: u64| {
            if of == 0 {
                0
            } else {
                ((part as u128 * total as u128 + of as u128 / 2) / of as u128) as u64
            }
        };
        let (ns, n) = (
            share(r.device_ns, sampled_ns, ns),
            share(r.kernels, sampled_n, n),
        );
        let figures = GpuLineCalls {
            gpu_kernel_s: ns as f64 / 1e9,
            gpu_kernels: n,
            ..GpuLineCalls::default()
        };
        let named = (k.name(r.name).to_string(), (ns, n));
        (r.frames.as_slice(), r.tid, r.first_ns, figures, named)
    })
}

/// What the sampled rows of each (device, name) stand for: device nanoseconds and kernels.
fn sampled_sums(k: &GpuKernels) -> HashMap<(u32, u32), (u64, u64)> {
    let mut out: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
    for r in &k.sampled {
        let e = out.entry((r.device, r.name)).or_default();
        e.0 = e.0.saturating_add(r.device_ns);
        e.1 = e.1.saturating_add(r.kernels);
    }
    out
}

/// A kernel name with its device nanoseconds and count.
pub type Named = (String, (u64, u64));

/// Add `from`'s kernels to `into`.
pub fn merge(into: &mut HashMap<String, (u64, u64)>, from: HashMap<String, (u64, u64)>) {
    for (name, (ns, n)) in from {
        let e = into.entry(name).or_default();
        e.0 = e.0.saturating_add(ns);
        e.1 = e.1.saturating_add(n);
    }
}

/// A line's kernels that took most device time, most first.
pub fn top(kernels: HashMap<String, (u64, u64)>) -> Vec<KernelShare> {
    let mut out: Vec<KernelShare> = kernels
        .into_iter()
        .filter(|(_, (ns, _))| *ns > 0)
        .map(|(name, (ns, n))| KernelShare {
            name,
            device: None,
            gpu_s: ns as f64 / 1e9,
            kernels: n,
        })
        .collect();
    sort(&mut out);
    out.truncate(LINE_TOP);
    out
}

/// A process's kernels in total, by CUPTI's account; `None` when it never looked for CUPTI.
pub fn process(k: &GpuKernels) -> Option<ProcessKernels> {
    let (state, detail) = k.state?;
    let total_ns = k
        .all
        .iter()
        .fold(0u64, |t, s| t.saturating_add(s.device_ns));
    let sampled = sampled_sums(k);
    let unattributed_ns: u64 = k
        .all
        .iter()
        .filter(|s| sampled.get(&(s.device, s.name)).is_none_or(|x| x.0 == 0))
        .fold(0u64, |t, s| t.saturating_add(s.device_ns));
    let mut top: Vec<KernelShare> = k
        .all
        .iter()
        .map(|s| KernelShare {
            name: k.name(s.name).to_string(),
            device: Some(s.device),
            gpu_s: s.device_ns as f64 / 1e9,
            kernels: s.kernels,
        })
        .collect();
    sort(&mut top);
    top.truncate(PROCESS_TOP);
    let (state, mut note) = match state {
        gpu_trace::ON => ("on", String::new()),
        gpu_trace::NO_CUPTI => (
            "no_cupti",
            "no CUPTI library (libcupti.so.12 or .13) beside the process's CUDA libraries: \
             install CUPTI (pip install nvidia-cuda-cupti-cu12, or the CUDA toolkit's) for GPU \
             time per line"
                .to_string(),
        ),
        gpu_trace::PROGRAM_OWNS => (
            "program_owns",
            format!(
                "the program took CUPTI for a profiler of its own (torch.profiler, Nsight) at \
                 {:.2} s: kernels after that are not counted",
                k.taken_ns.unwrap_or(0) as f64 / 1e9
            ),
        ),
        _ => (
            "failed",
            format!("CUPTI refused to record kernels (its error {detail})"),
        ),
    };
    if k.dropped > 0 {
        let dropped = format!(
            "CUPTI dropped {} activity records (its buffers were full): their kernels are \
             missing",
            k.dropped
        );
        note = if note.is_empty() {
            dropped
        } else {
            format!("{note}; {dropped}")
        };
    }
    Some(ProcessKernels {
        state: state.to_string(),
        note,
        gpu_kernel_s: total_ns as f64 / 1e9,
        unattributed_s: unattributed_ns as f64 / 1e9,
        kernels: k.all.iter().fold(0u64, |t, s| t.saturating_add(s.kernels)),
        dropped_records: k.dropped,
        top,
    })
}

/// One process's kernels over its images (a process that `exec`s has a channel per image):
/// totals summed, the top lists merged, the later state's words kept.
pub fn merge_process(into: &mut ProcessKernels, other: ProcessKernels) {
    into.gpu_kernel_s += other.gpu_kernel_s;
    into.unattributed_s += other.unattributed_s;
    into.kernels = into.kernels.saturating_add(other.kernels);
    into.dropped_records = into.dropped_records.saturating_add(other.dropped_records);
    for t in other.top {
        match into
            .top
            .iter_mut()
            .find(|u| u.name == t.name && u.device == t.device)
        {
            Some(u) => {
                u.gpu_s += t.gpu_s;
                u.kernels = u.kernels.saturating_add(t.kernels);
            }
            None => into.top.push(t),
        }
    }
    sort(&mut into.top);
    into.top.truncate(PROCESS_TOP);
    if into.state != "on" || other.state != "on" {
        into.state = other.state;
        into.note = other.note;
    }
}

/// Most device time first, then by name.
fn sort(v: &mut [KernelShare]) {
    v.sort_by(|a, b| {
        b.gpu_s
            .total_cmp(&a.gpu_s)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.device.cmp(&b.device))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{GpuKernelSum, GpuKernelTotal};

    fn kernels() -> GpuKernels {
        let row = |frames: Vec<(u32, i32)>, name, kernels, device_ns| GpuKernelTotal {
            tid: 1,
            frames,
            device: 0,
            name,
            kernels,
            device_ns,
            ..GpuKernelTotal::default()
        };
        GpuKernels {
            names: vec!["gemm".into(), "relu".into(), "copy".into()],
            // gemm: 4000 kernels, 0.4 s; relu: 20, 0.4 s; copy: 7, 1 ms, never sampled.
            all: vec![
                GpuKernelSum {
                    device: 0,
                    name: 0,
                    kernels: 4000,
                    device_ns: 400_000_000,
                },
                GpuKernelSum {
                    device: 0,
                    name: 1,
                    kernels: 20,
                    device_ns: 400_000_000,
                },
                GpuKernelSum {
                    device: 0,
                    name: 2,
                    kernels: 7,
                    device_ns: 1_000_000,
                },
            ],
            // Samples: gemm 48 x 64 from line a, 16 x 64 from line b; relu once, itself.
            sampled: vec![
                row(vec![(1, 1)], 0, 48 * 64, 48 * 64 * 100_000),
                row(vec![(1, 2)], 0, 16 * 64, 16 * 64 * 100_000),
                row(vec![(1, 3)], 1, 1, 20_000_000),
            ],
            state: Some((gpu_trace::ON, 130202)),
            ..GpuKernels::default()
        }
    }

    #[test]
    fn each_kernels_exact_time_is_shared_among_the_lines_that_ran_it() {
        let k = kernels();
        type Row = (Vec<(u32, i32)>, f64, u64);
        let got: Vec<Row> = rows(&k)
            .map(|(frames, _, _, g, _)| (frames.to_vec(), g.gpu_kernel_s, g.gpu_kernels))
            .collect();
        assert_eq!(
            got,
            vec![
                (vec![(1, 1)], 0.3, 3000),
                (vec![(1, 2)], 0.1, 1000),
                (vec![(1, 3)], 0.4, 20), // one sample of it: all of it
            ]
        );
        let p = process(&k).unwrap();
        assert_eq!((p.state.as_str(), p.kernels), ("on", 4027));
        assert!((p.gpu_kernel_s - 0.801).abs() < 1e-12);
        assert!(
            (p.unattributed_s - 0.001).abs() < 1e-12,
            "copy ran on no line"
        );
        assert_eq!(p.top[0].name, "gemm"); // ties by name
        assert!(p.note.is_empty());
    }

    #[test]
    fn the_state_is_told_in_words() {
        let mut k = kernels();
        k.state = Some((gpu_trace::PROGRAM_OWNS, 0));
        k.taken_ns = Some(2_500_000_000);
        k.dropped = 12;
        let p = process(&k).unwrap();
        assert_eq!(p.state, "program_owns");
        assert!(
            p.note.contains("at 2.50 s") && p.note.contains("dropped 12"),
            "{p:?}"
        );
        k.state = Some((gpu_trace::FAILED, 35));
        assert!(process(&k).unwrap().note.contains("error 35"));
        assert!(process(&GpuKernels::default()).is_none());
    }
}
