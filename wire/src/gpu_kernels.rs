//! Records of the GPU's own account of the kernels it ran (CUPTI's activity records, read in
//! the profiled process and sent as they are completed): each kernel's device time, the
//! pairing of a sampled launch with the API call that made it, kernel names, and the state of
//! the trace. See docs/design/gpu-kernel-time.md.

use crate::record::{Kind, Record};

/// [`Kind::GpuKernel`]: one kernel ran on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuKernel {
    /// When it began on the device (`CLOCK_MONOTONIC` ns).
    pub start_ns: u64,
    /// When it ended (`CLOCK_MONOTONIC` ns).
    pub end_ns: u64,
    /// The device it ran on.
    pub device: u32,
    /// The stream it ran in.
    pub stream: u32,
    /// CUPTI's id of the API call that launched it.
    pub correlation: u32,
    /// Its name's key: the name follows, once, in a [`Kind::GpuKernelName`] record.
    pub name: u64,
}

/// [`Kind::GpuCorrelation`]: a sampled launch ([`crate::GpuLaunch::external`]) was the API
/// call with CUPTI's id `correlation`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCorrelation {
    /// The id the launch sample carries.
    pub external: u64,
    /// CUPTI's id of the call.
    pub correlation: u32,
}

/// Most bytes of a kernel's name ([`Kind::GpuKernelName`]); longer names are cut.
pub const MAX_KERNEL_NAME: usize = 512;

/// States of the kernel trace ([`Kind::GpuTrace`]).
pub mod gpu_trace {
    /// Recording kernels; `detail` = CUPTI's API version.
    pub const ON: u8 = 0;
    /// No CUPTI library was found beside the CUDA libraries the process loaded.
    pub const NO_CUPTI: u8 = 1;
    /// CUPTI refused (`detail` = its error code).
    pub const FAILED: u8 = 2;
    /// The program took CUPTI for itself (a profiler of its own): mlprof stopped recording.
    pub const PROGRAM_OWNS: u8 = 3;
    /// Records CUPTI dropped so far (`detail` = how many, in all).
    pub const DROPPED: u8 = 4;
    /// The last valid value.
    pub const LAST: u8 = DROPPED;
}

impl Record {
    /// A [`Kind::GpuKernel`] record (written by the thread that read CUPTI's buffer).
    pub fn gpu_kernel(tid: u32, ts_ns: u64, k: GpuKernel) -> Record {
        let c = k.device as u64 | (k.stream as u64) << 32;
        let words = [k.start_ns, k.end_ns, c, k.correlation as u64, k.name];
        Record::with(Kind::GpuKernel, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::GpuKernel`] record.
    pub fn as_gpu_kernel(&self) -> Option<GpuKernel> {
        let [a, b, c, d, e] = self.words_of(Kind::GpuKernel)?;
        Some(GpuKernel {
            start_ns: a,
            end_ns: b,
            device: c as u32,
            stream: (c >> 32) as u32,
            correlation: u32::try_from(d).ok()?,
            name: e,
        })
    }

    /// A [`Kind::GpuCorrelation`] record.
    pub fn gpu_correlation(tid: u32, ts_ns: u64, c: GpuCorrelation) -> Record {
        let words = [c.external, c.correlation as u64, 0, 0, 0];
        Record::with(Kind::GpuCorrelation, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::GpuCorrelation`] record.
    pub fn as_gpu_correlation(&self) -> Option<GpuCorrelation> {
        let [a, b, ..] = self.words_of(Kind::GpuCorrelation)?;
        Some(GpuCorrelation {
            external: a,
            correlation: u32::try_from(b).ok()?,
        })
    }

    /// A [`Kind::GpuKernelName`] record: the name of key `name`, `len` bytes (UTF-8, at most
    /// [`MAX_KERNEL_NAME`]) following in [`Kind::Data`] records.
    pub fn gpu_kernel_name(tid: u32, ts_ns: u64, name: u64, len: usize) -> Record {
        let words = [name, len as u64, 0, 0, 0];
        Record::with(Kind::GpuKernelName, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::GpuKernelName`] record: the key and the bytes that follow.
    pub fn as_gpu_kernel_name(&self) -> Option<(u64, usize)> {
        let [a, b, ..] = self.words_of(Kind::GpuKernelName)?;
        let len = usize::try_from(b).ok().filter(|&l| l <= MAX_KERNEL_NAME)?;
        Some((a, len))
    }

    /// A [`Kind::GpuTrace`] record: the trace's `state` ([`gpu_trace`]) and its detail.
    pub fn gpu_trace(tid: u32, ts_ns: u64, state: u8, detail: u64) -> Record {
        Record::with(Kind::GpuTrace, tid, ts_ns, [state as u64, detail, 0, 0, 0])
    }

    /// The payload of a [`Kind::GpuTrace`] record.
    pub fn as_gpu_trace(&self) -> Option<(u8, u64)> {
        let [a, b, ..] = self.words_of(Kind::GpuTrace)?;
        let state = u8::try_from(a).ok().filter(|&s| s <= gpu_trace::LAST)?;
        Some((state, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_records_round_trip_and_nonsense_is_refused() {
        let k = GpuKernel {
            start_ns: 10,
            end_ns: 25,
            device: 1,
            stream: 7,
            correlation: 99,
            name: 0xdead_beef,
        };
        assert_eq!(Record::gpu_kernel(3, 30, k).as_gpu_kernel(), Some(k));
        let c = GpuCorrelation {
            external: 1 << 40,
            correlation: 99,
        };
        assert_eq!(
            Record::gpu_correlation(3, 30, c).as_gpu_correlation(),
            Some(c)
        );
        assert_eq!(
            Record::gpu_kernel_name(3, 30, 5, 12).as_gpu_kernel_name(),
            Some((5, 12))
        );
        assert_eq!(
            Record::gpu_kernel_name(3, 30, 5, MAX_KERNEL_NAME + 1).as_gpu_kernel_name(),
            None
        );
        assert_eq!(
            Record::gpu_trace(3, 30, gpu_trace::DROPPED, 4).as_gpu_trace(),
            Some((gpu_trace::DROPPED, 4))
        );
        assert_eq!(Record::gpu_trace(3, 30, 9, 0).as_gpu_trace(), None);
        // A record of another kind is not read as one of these.
        assert_eq!(Record::gpu_trace(3, 30, 0, 0).as_gpu_kernel(), None);
        let mut wide = Record::gpu_kernel(3, 30, k);
        wide.d = 1 << 40;
        assert_eq!(wide.as_gpu_kernel(), None);
    }
}
