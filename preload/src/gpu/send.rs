//! What the CUDA hooks tell the collector: every allocation, free and copy with the calling
//! thread's Python stack, a sample of the kernel launches, and the time spent waiting for the
//! GPU. Runs in the program's CUDA calls (never in a signal handler): no allocation, no
//! locks; errno is kept.

use core::sync::atomic::{AtomicU64, Ordering};

use mlprof_wire::gpu::UNKNOWN_DEVICE;
use mlprof_wire::{GpuAlloc, GpuCopy, GpuFree, GpuLaunch, Record};

use super::real::{self, Func};
use crate::hooks::wait;
use crate::memory::sampler;
use crate::python::{runtime, stack};
use crate::{channel, clock, local};

/// Mean kernel launches between launch samples (1: every launch; 0: none), from
/// `MLPROF_GPU_LAUNCH_SAMPLE` (default [`DEFAULT_LAUNCH_MEAN`]).
static LAUNCH_MEAN: AtomicU64 = AtomicU64::new(DEFAULT_LAUNCH_MEAN);
/// A launch costs the program a few microseconds of CPU (the runtime's own 2-5 us, and a
/// framework's dispatch around it); recording one with its stack costs about 10 us when the
/// thread does not hold the GIL (PyTorch releases it around its ops), read through the kernel.
/// One in 64, drawn at random, adds about 0.2 us per launch and keeps the count unbiased
/// (`bench/gpu_hooks.py`).
pub const DEFAULT_LAUNCH_MEAN: u64 = 64;

/// Set the mean launches between launch samples (load time).
pub fn configure(launch_mean: u64) {
    LAUNCH_MEAN.store(launch_mean, Ordering::Relaxed);
}

/// One interposed CUDA call in progress on this thread; only the outermost of nested ones
/// (a runtime that calls its own exported functions) is told.
pub struct Call {
    outermost: bool,
}

impl Call {
    /// The call begins.
    #[inline]
    pub fn begin() -> Call {
        let outermost = local::with(|l| {
            let depth = l.cuda_calls.get();
            l.cuda_calls.set(depth.saturating_add(1));
            depth == 0
        });
        Call { outermost }
    }

    /// Whether this call is the outermost: the one to tell the collector about.
    #[inline]
    pub fn outermost(&self) -> bool {
        self.outermost
    }
}

impl Drop for Call {
    #[inline]
    fn drop(&mut self) {
        local::with(|l| l.cuda_calls.set(l.cuda_calls.get().saturating_sub(1)));
    }
}

/// Whether records can go out now.
#[inline]
fn open() -> bool {
    channel::ring().is_some() && !channel::collector_gone()
}

/// Send `head`'s record with this thread's stack, unless the thread is inside mlprof.
fn with_stack(head: impl FnOnce(u32, u64, usize) -> Record) {
    if !open() {
        return;
    }
    let _errno = crate::errno::Saved::new();
    local::with(|l| {
        let Some(_entered) = l.enter() else { return };
        let reads = sampler::reads(runtime::holds_gil());
        stack::send(reads, |tid, ts_ns, stack| head(tid, ts_ns, stack.depth));
    });
}

/// The calling thread's current device, as the runtime says ([`UNKNOWN_DEVICE`] if it
/// cannot).
pub fn runtime_device() -> u32 {
    type GetDevice = unsafe extern "C" fn(*mut libc::c_int) -> libc::c_int;
    let Some(f) = real::address(Func::GetDevice) else {
        return UNKNOWN_DEVICE;
    };
    // SAFETY: the runtime's `cudaGetDevice` (its documented signature).
    let f: GetDevice = unsafe { core::mem::transmute::<usize, GetDevice>(f) };
    let _errno = crate::errno::Saved::new();
    let mut device: libc::c_int = -1;
    // SAFETY: a valid out-pointer. Called only after an allocation succeeded on this thread,
    // so the runtime is initialised and the call cannot fail into its sticky error.
    match unsafe { f(&mut device) } {
        0 if device >= 0 => device as u32,
        _ => UNKNOWN_DEVICE,
    }
}

/// `size` bytes of `space` memory were given at `addr` (a handle for
/// `gpu_space::PHYSICAL`) on `device`.
pub fn alloc(addr: usize, size: usize, space: u8, device: u32) {
    if addr == 0 || !open() {
        return;
    }
    with_stack(|tid, ts_ns, depth| {
        let alloc = GpuAlloc {
            addr: addr as u64,
            size: size as u64,
            device,
            space,
            depth: depth as u32,
        };
        Record::gpu_alloc(tid, ts_ns, alloc)
    });
}

/// The `space` memory at `addr` was given back.
pub fn free(addr: usize, space: u8) {
    if addr == 0 || !open() {
        return;
    }
    let freed = GpuFree {
        addr: addr as u64,
        space,
    };
    channel::send(&Record::gpu_free(
        clock::tid(),
        clock::monotonic_ns(),
        freed,
    ));
}

/// `bytes` were copied in `direction` (a `gpu_copy` value).
pub fn copy(bytes: usize, direction: u8, synchronous: bool) {
    if bytes == 0 {
        return;
    }
    with_stack(|tid, ts_ns, depth| {
        let copy = GpuCopy {
            bytes: bytes as u64,
            direction,
            synchronous,
            depth: depth as u32,
        };
        Record::gpu_copy(tid, ts_ns, copy)
    });
}

/// A launch token ([`launch_begin`]): bit 62 marks a sampled launch (so a token is never 0),
/// bit 63 one that stands for itself, the bits below the id pushed to CUPTI (0: none).
const SAMPLED: u64 = 1 << 62;
const ITSELF: u64 = 1 << 63;
const ID_MASK: u64 = SAMPLED - 1;

/// A kernel (or graph) launch of `func` (the kernel's or graph's handle) begins: set CUPTI up
/// at the process's first. The first launch of each `func` is sampled standing for itself
/// (so every kernel the process runs has a stack: `docs/design/gpu-kernel-time.md`); the
/// others are counted against this thread's launch countdown, and sampled standing for the mean
/// when it runs out. Around a sampled launch an id is pushed to CUPTI (when CUPTI records), so
/// its kernels can be told. Returns what [`launch_end`] needs (0: not sampled).
#[inline]
pub fn launch_begin(call: &Call, func: usize) -> u64 {
    if !call.outermost() {
        return 0;
    }
    super::cupti::ensure();
    let mean = LAUNCH_MEAN.load(Ordering::Relaxed);
    if mean == 0 {
        return 0;
    }
    if mean > 1 && first_launch_of(func) {
        return token(1);
    }
    let due = local::with(|l| {
        let mut left = l.launch_left.get();
        if left <= 0 {
            left = gap(l, mean); // the first launch on this thread
        }
        left -= 1;
        if left > 0 {
            l.launch_left.set(left);
            return false;
        }
        l.launch_left.set(gap(l, mean));
        true
    });
    if !due {
        return 0;
    }
    token(mean)
}

/// A sampled launch standing for `weight` launches: its id pushed to CUPTI, and the token
/// [`launch_end`] reads.
fn token(weight: u64) -> u64 {
    let itself = if weight == 1 { ITSELF } else { 0 };
    SAMPLED | itself | (super::cupti::push() & ID_MASK)
}

/// Whether this is the first launch of `func` in the process (a fixed table of the handles
/// seen: past it, launches are only sampled by the countdown).
fn first_launch_of(func: usize) -> bool {
    static SEEN: super::seen::Seen<4096> = super::seen::Seen::new();
    SEEN.first(func as u64)
}

/// The launch [`launch_begin`] began returned (`ok`: it succeeded): the id is popped, and a
/// sampled launch that succeeded is sent with its stack.
#[inline]
pub fn launch_end(token: u64, ok: bool) {
    if token == 0 {
        return;
    }
    let id = token & ID_MASK;
    if id != 0 {
        super::cupti::pop();
    }
    if !ok {
        return;
    }
    let weight = if token & ITSELF != 0 {
        1
    } else {
        LAUNCH_MEAN.load(Ordering::Relaxed).max(1)
    };
    with_stack(|tid, ts_ns, depth| {
        let launch = GpuLaunch {
            weight,
            depth: depth as u32,
            external: id,
        };
        Record::gpu_launch(tid, ts_ns, launch)
    });
}

/// Launches up to and including the next sampled one: geometric with mean `mean`, so that each
/// launch is sampled with probability 1/`mean` whatever the others did (a loop launching the
/// same kernels in the same order every step is counted without bias).
fn gap(l: &local::Local, mean: u64) -> i64 {
    if mean <= 1 {
        return 1;
    }
    let uniform = sampler::uniform(l);
    let p = 1.0 / mean as f64;
    let gap = 1.0 + (uniform.ln() / (1.0 - p).ln()).floor();
    if gap.is_finite() && gap >= 1.0 {
        gap.min(i64::MAX as f64 / 2.0) as i64
    } else {
        1
    }
}

/// A call that waits for the GPU begins: returns what [`wait_end`] needs.
#[inline]
pub fn wait_begin(call: &Call) -> u64 {
    if !call.outermost() {
        return 0; // the outer call times it
    }
    let since = if open() { wait::begin() } else { 0 };
    // After `begin`, which times no wait inside one for the GPU: the driver's own (a `poll`
    // or a sleep while it blocks) are part of this one.
    local::with(|l| l.gpu_waiting.set(1));
    since
}

/// The call that [`wait_begin`] began returned: its time off the CPU goes out as GPU wait.
#[inline]
pub fn wait_end(call: &Call, since: u64) {
    if !call.outermost() {
        return;
    }
    local::with(|l| l.gpu_waiting.set(0));
    wait::end(since, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_gaps_are_geometric_with_the_asked_mean() {
        local::with(|l| {
            for mean in [1u64, 2, 16, 100] {
                let n = 200_000u64;
                let total: i64 = (0..n).map(|_| gap(l, mean)).sum();
                let got = total as f64 / n as f64;
                // The standard error of a geometric mean of 200k draws is under 0.25% of it.
                assert!(
                    (got - mean as f64).abs() <= 0.01 * mean as f64 + 1e-9,
                    "mean {mean}: {got}"
                );
                assert!((0..1000).all(|_| gap(l, mean) >= 1));
            }
        });
    }
}
