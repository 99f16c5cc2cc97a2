//! Hints drawn from the CUDA-call figures: a line whose thread stands waiting for the GPU
//! (`.item()`, `.cpu()`, a synchronisation) a large share of the run, a line copying a large
//! volume from host to device, a line pinning host memory again and again without giving it
//! back, and a line launching kernels too small to keep the GPU busy. Thresholds in
//! `docs/design/hints.md`. Pure.

use super::hints::at;
use crate::model::{Hint, HintKind, LineStats, Profile};
use crate::units::{bytes, seconds};

const MIB: u64 = 1 << 20;
/// A GPU wait below this share of the run's sampled time, or this many seconds, is no hint.
const WAIT_SHARE: f64 = 0.2;
const WAIT_MIN_S: f64 = 0.1;
/// Host-to-device copies below this volume are no hint.
const H2D_MIN: u64 = 64 * MIB;
/// Pinned memory a line still holds at the end below this is no hint...
const PINNED_END_MIN: u64 = 64 * MIB;
/// ...nor is pinned memory taken in fewer calls than this (pinned once is the advice).
const PINNED_CALLS_MIN: u64 = 8;
/// Kernels averaging more device time than this keep a GPU busy (a launch costs the CPU a
/// few microseconds, and a framework's dispatch around it more)...
const SMALL_KERNEL_S: f64 = 20e-6;
/// ...and a line launching fewer than this is no hint...
const SMALL_KERNELS_MIN: u64 = 1000;
/// ...nor one whose CPU time is below this share of the run's sampled time, or this long.
const SMALL_KERNELS_SHARE: f64 = 0.05;
const SMALL_KERNELS_MIN_S: f64 = 0.1;

/// What in a line's code reads a GPU value back on the host (and so waits for the GPU).
const READS_BACK: [&str; 6] = [
    ".item()",
    ".cpu()",
    ".tolist()",
    ".numpy()",
    "float(",
    "print(",
];

/// The GPU hints of `l`; `whole_s`: the run's sampled time (Python + native + waiting).
pub fn of(l: &LineStats, whole_s: f64) -> Vec<Hint> {
    let mut out = Vec::new();
    out.extend(waits(l, whole_s));
    out.extend(host_to_device(l));
    out.extend(pinned_growth(l));
    out.extend(small_kernels(l, whole_s));
    out
}

/// A line launching many kernels that average a few microseconds of device time, whose CPU
/// time (Python and native: the framework's dispatch and the launches) exceeds the GPU time of
/// what it launched: the GPU idles between them, waiting for the CPU.
fn small_kernels(l: &LineStats, whole_s: f64) -> Option<Hint> {
    let g = &l.measures.gpu_calls;
    let cpu = l.measures.cpu_python_s + l.measures.cpu_native_s;
    if g.gpu_kernels < SMALL_KERNELS_MIN
        || g.gpu_kernel_s >= SMALL_KERNEL_S * g.gpu_kernels as f64
        || cpu <= g.gpu_kernel_s
        || cpu < SMALL_KERNELS_MIN_S
        || cpu < SMALL_KERNELS_SHARE * whole_s
    {
        return None;
    }
    let mut h = at(HintKind::SmallKernels, l);
    h.evidence = format!(
        "launches {} kernels averaging {:.1} us on the GPU ({} of GPU time), while the CPU \
         spends {} here",
        g.gpu_kernels,
        1e6 * g.gpu_kernel_s / g.gpu_kernels as f64,
        seconds(g.gpu_kernel_s),
        seconds(cpu)
    );
    h.suggestion = "the GPU finishes each kernel before the CPU has launched the next, so it \
                    idles: fuse the small operations (`torch.compile`), replay the step as a \
                    CUDA graph (`torch.compile(mode=\"reduce-overhead\")`, \
                    `torch.cuda.CUDAGraph`), or give each kernel more work (larger batches)"
        .into();
    h.saving_s = Some(cpu - g.gpu_kernel_s);
    h.saving = format!(
        "up to {} of the line's time, the CPU's launching beyond what the GPU ran",
        seconds(cpu - g.gpu_kernel_s)
    );
    Some(h)
}

/// A line standing waiting for the GPU for a fifth of the run or more.
fn waits(l: &LineStats, whole_s: f64) -> Option<Hint> {
    let wait = l.measures.gpu_calls.gpu_wait_s;
    if wait < WAIT_MIN_S || wait < WAIT_SHARE * whole_s {
        return None;
    }
    let code = l.source.split('#').next().unwrap_or("");
    let reads_back = READS_BACK.iter().any(|r| code.contains(r));
    let mut h = at(HintKind::GpuWait, l);
    h.evidence = format!(
        "waits {} for the GPU ({:.0}% of the run's time)",
        seconds(wait),
        100.0 * wait / whole_s.max(1e-9)
    );
    h.suggestion = if reads_back {
        "reading a GPU value back (`.item()`, `.cpu()`) makes the CPU wait for all the work \
         queued before it: in a training loop, keep running values on the device \
         (`total += loss.detach()`) and read them every N steps or at the end"
            .into()
    } else {
        "the thread waits here for the work queued before this line to finish: if the \
         synchronisation is not needed every step, remove it or do it every N steps, so that \
         the CPU queues the next step's work meanwhile"
            .into()
    };
    h.saving_s = Some(wait);
    h.saving = format!(
        "up to {} of waiting the CPU could spend queueing work (the GPU's own time stays)",
        seconds(wait)
    );
    Some(h)
}

/// A line copying a large volume from host to device.
fn host_to_device(l: &LineStats) -> Option<Hint> {
    let h2d = l.measures.gpu_calls.gpu_h2d_bytes;
    if h2d < H2D_MIN {
        return None;
    }
    let mut h = at(HintKind::GpuCopies, l);
    h.evidence = format!("copies {} from host to device", bytes(h2d));
    h.suggestion = "if it is the same data every step, move it to the device once and keep it \
                    there; otherwise copy from pinned memory (`pin_memory=True` in the \
                    DataLoader) with `non_blocking=True`, so that the copy overlaps the GPU's work"
        .into();
    h.saving_bytes = Some(h2d);
    h.saving = format!("up to {} of host-to-device copies", bytes(h2d));
    Some(h)
}

/// A line that pins host memory in many calls and keeps most of it to the end: its pinned
/// memory grew over the run.
fn pinned_growth(l: &LineStats) -> Option<Hint> {
    let g = &l.measures.gpu_calls;
    let kept = g.gpu_pinned_end_bytes;
    if kept < PINNED_END_MIN
        || g.gpu_pinned_calls < PINNED_CALLS_MIN
        || 2 * kept < g.gpu_pinned_bytes
    {
        return None;
    }
    let mut h = at(HintKind::PinnedGrowth, l);
    h.evidence = format!(
        "pins {} of host memory in {} calls, {} of it still held at the end",
        bytes(g.gpu_pinned_bytes),
        g.gpu_pinned_calls,
        bytes(kept)
    );
    h.suggestion = "page-locked memory is taken here again and again and not given back, so \
                    it grows with the run (and cannot be swapped out): allocate one pinned \
                    buffer and copy each batch into it, or pin once (`pin_memory()` on a tensor \
                    made once); if the pinned tensors are kept alive (a list of batches), let \
                    them go, so that PyTorch's pinned-memory cache can reuse their blocks"
        .into();
    // Keeping one buffer of the line's mean size.
    let saving = kept.saturating_sub(g.gpu_pinned_bytes / g.gpu_pinned_calls);
    h.saving_bytes = Some(saving);
    h.saving = format!("up to {} of pinned host memory", bytes(saving));
    Some(h)
}

/// The run's sampled time, as the hints weigh a line's wait against it.
pub fn whole_s(p: &Profile) -> f64 {
    p.lines.iter().map(|l| l.measures.time_s()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::GpuLineCalls;

    fn line(source: &str, wait_s: f64, h2d: u64) -> LineStats {
        let mut l = LineStats {
            file: "/job/train.py".into(),
            line: 9,
            source: source.into(),
            ..LineStats::default()
        };
        l.measures.gpu_calls = GpuLineCalls {
            gpu_wait_s: wait_s,
            gpu_h2d_bytes: h2d,
            ..GpuLineCalls::default()
        };
        l
    }

    #[test]
    fn a_read_back_waiting_a_fifth_of_the_run_is_told_to_stay_on_the_device() {
        let hints = of(
            &line("    loss_sum += loss.item()  # .cpu() here", 3.0, 0),
            10.0,
        );
        assert_eq!(hints.len(), 1);
        assert_eq!(hints[0].kind, HintKind::GpuWait);
        assert!(hints[0].suggestion.contains("loss.detach()"));
        // A wait that is not a read back gets the general advice; a short one none.
        let plain = of(&line("torch.cuda.synchronize()", 3.0, 0), 10.0);
        assert!(plain[0].suggestion.starts_with("the thread waits"));
        assert!(of(&line("x.item()", 1.9, 0), 10.0).is_empty());
        assert!(of(&line("x.item()", 0.09, 0), 0.2).is_empty());
    }

    /// A line that pinned `calls` blocks of `size`, of which `freed` were given back.
    fn pinning(calls: u64, size: u64, freed: u64) -> LineStats {
        let mut l = line("buf = torch.empty(n).pin_memory()", 0.0, 0);
        l.measures.gpu_calls = GpuLineCalls {
            gpu_pinned_bytes: calls * size,
            gpu_pinned_calls: calls,
            gpu_pinned_end_bytes: (calls - freed) * size,
            ..GpuLineCalls::default()
        };
        l
    }

    #[test]
    fn pinned_memory_taken_again_and_again_and_kept_is_told_and_reuse_is_not() {
        let hints = of(&pinning(20, 4 * MIB, 0), 10.0);
        assert_eq!((hints.len(), hints[0].kind), (1, HintKind::PinnedGrowth));
        assert_eq!(hints[0].saving_bytes, Some(76 * MIB), "all but one buffer");
        assert!(hints[0]
            .evidence
            .contains("in 20 calls, 80.0 MiB of it still held"));
        // Given back each time (reused), pinned once, too little, or mostly given back: none.
        for quiet in [
            pinning(20, 4 * MIB, 20),
            pinning(1, 256 * MIB, 0),
            pinning(15, 4 * MIB, 0),
            pinning(7, 16 * MIB, 0),
            pinning(40, 4 * MIB, 21),
        ] {
            assert!(
                of(&quiet, 10.0).is_empty(),
                "{:?}",
                quiet.measures.gpu_calls
            );
        }
        // Half kept, 64 MiB in 8 calls: at the thresholds.
        assert_eq!(of(&pinning(16, 8 * MIB, 8), 10.0).len(), 1);
    }

    #[test]
    fn large_host_to_device_copies_are_told_and_small_ones_are_not() {
        let hints = of(&line("x = batch.to('cuda')", 0.0, 64 * MIB), 10.0);
        assert_eq!((hints.len(), hints[0].kind), (1, HintKind::GpuCopies));
        assert_eq!(hints[0].saving_bytes, Some(64 * MIB));
        assert!(of(&line("x = batch.to('cuda')", 0.0, 64 * MIB - 1), 10.0).is_empty());
    }
}
