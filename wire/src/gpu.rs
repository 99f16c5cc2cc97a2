//! Records of the CUDA runtime calls the preload library interposes: GPU memory given and
//! given back, copies between host and device, and sampled kernel launches. The time a thread
//! waits for the GPU travels in [`crate::Sample`]s flagged [`crate::sample_flags::GPU_WAIT`].
//! See docs/design/gpu.md.

use crate::record::{Kind, Record};

/// What kind of memory a [`GpuAlloc`] is.
pub mod gpu_space {
    /// Device memory (`cudaMalloc`, `cudaMallocAsync`).
    pub const DEVICE: u8 = 0;
    /// Page-locked host memory (`cudaMallocHost`, `cudaHostAlloc`).
    pub const PINNED: u8 = 1;
    /// Managed (unified) memory (`cudaMallocManaged`).
    pub const MANAGED: u8 = 2;
    /// Physical device memory made for virtual mappings (`cuMemCreate`), known by its handle
    /// rather than an address.
    pub const PHYSICAL: u8 = 3;
    /// The last valid value.
    pub const LAST: u8 = PHYSICAL;

    /// Which allocations a free of `space` can give back: device and managed memory share
    /// addresses (one `cudaFree` frees both); pinned host memory and physical handles are
    /// numbered apart.
    pub fn key_class(space: u8) -> u8 {
        match space {
            PINNED => 1,
            PHYSICAL => 2,
            _ => 0,
        }
    }
}

/// The direction of a [`GpuCopy`] (CUDA's `cudaMemcpyKind`, with `cudaMemcpyDefault` told
/// apart by the pointers when the runtime could say).
pub mod gpu_copy {
    /// Host to host.
    pub const HOST_TO_HOST: u8 = 0;
    /// Host to device.
    pub const HOST_TO_DEVICE: u8 = 1;
    /// Device to host.
    pub const DEVICE_TO_HOST: u8 = 2;
    /// Device to device (peer copies included).
    pub const DEVICE_TO_DEVICE: u8 = 3;
    /// Not known (`cudaMemcpyDefault` with pointers the runtime did not describe).
    pub const UNKNOWN: u8 = 4;
}

/// Device number meaning "not known" in a [`GpuAlloc`].
pub const UNKNOWN_DEVICE: u32 = u32::MAX;

/// [`Kind::GpuAlloc`]: a CUDA call gave the process GPU memory; `depth` [`Kind::Frames`]
/// words follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuAlloc {
    /// The address returned.
    pub addr: u64,
    /// Bytes asked for.
    pub size: u64,
    /// The device (the calling thread's current one; [`UNKNOWN_DEVICE`] if not known).
    pub device: u32,
    /// One of [`gpu_space`].
    pub space: u8,
    /// Python frames that follow.
    pub depth: u32,
}

/// [`Kind::GpuFree`]: GPU memory given back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuFree {
    /// The address given back.
    pub addr: u64,
    /// One of [`gpu_space`].
    pub space: u8,
}

/// [`Kind::GpuCopy`]: a copy made through CUDA; `depth` [`Kind::Frames`] words follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCopy {
    /// Bytes copied.
    pub bytes: u64,
    /// One of [`gpu_copy`].
    pub direction: u8,
    /// Whether the call returned only once the copy was done (`cudaMemcpy`).
    pub synchronous: bool,
    /// Python frames that follow.
    pub depth: u32,
}

/// [`Kind::GpuLaunch`]: a sampled kernel launch; `depth` [`Kind::Frames`] words follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuLaunch {
    /// Launches this sample stands for.
    pub weight: u64,
    /// Python frames that follow.
    pub depth: u32,
    /// The id pushed to CUPTI around the launch, unique in the process (0: none).
    pub external: u64,
}

impl Record {
    /// A [`Kind::GpuAlloc`] record.
    pub fn gpu_alloc(tid: u32, ts_ns: u64, g: GpuAlloc) -> Record {
        let c = g.device as u64 | (g.space as u64) << 32;
        let words = [g.addr, g.size, c, g.depth as u64, 0];
        Record::with(Kind::GpuAlloc, tid, ts_ns, words)
    }

    /// The payload of a [`Kind::GpuAlloc`] record.
    pub fn as_gpu_alloc(&self) -> Option<GpuAlloc> {
        let [a, b, c, d, _] = self.words_of(Kind::GpuAlloc)?;
        Some(GpuAlloc {
            addr: a,
            size: b,
            device: c as u32,
            space: (c >> 32) as u8,
            depth: d as u32,
        })
    }

    /// A [`Kind::GpuFree`] record.
    pub fn gpu_free(tid: u32, ts_ns: u64, g: GpuFree) -> Record {
        Record::with(Kind::GpuFree, tid, ts_ns, [g.addr, g.space as u64, 0, 0, 0])
    }

    /// The payload of a [`Kind::GpuFree`] record.
    pub fn as_gpu_free(&self) -> Option<GpuFree> {
        let [a, b, ..] = self.words_of(Kind::GpuFree)?;
        Some(GpuFree {
            addr: a,
            space: b as u8,
        })
    }

    /// A [`Kind::GpuCopy`] record.
    pub fn gpu_copy(tid: u32, ts_ns: u64, g: GpuCopy) -> Record {
        let b = g.direction as u64 | (g.synchronous as u64) << 8;
        Record::with(
            Kind::GpuCopy,
            tid,
            ts_ns,
            [g.bytes, b, g.depth as u64, 0, 0],
        )
    }

    /// The payload of a [`Kind::GpuCopy`] record.
    pub fn as_gpu_copy(&self) -> Option<GpuCopy> {
        let [a, b, c, ..] = self.words_of(Kind::GpuCopy)?;
        Some(GpuCopy {
            bytes: a,
            direction: b as u8,
            synchronous: (b >> 8) & 1 != 0,
            depth: c as u32,
        })
    }

    /// A [`Kind::GpuLaunch`] record.
    pub fn gpu_launch(tid: u32, ts_ns: u64, g: GpuLaunch) -> Record {
        Record::with(
            Kind::GpuLaunch,
            tid,
            ts_ns,
            [g.weight, g.depth as u64, g.external, 0, 0],
        )
    }

    /// The payload of a [`Kind::GpuLaunch`] record.
    pub fn as_gpu_launch(&self) -> Option<GpuLaunch> {
        let [a, b, c, ..] = self.words_of(Kind::GpuLaunch)?;
        Some(GpuLaunch {
            weight: a,
            depth: b as u32,
            external: c,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_records_round_trip_with_extreme_values_and_only_through_their_kind() {
        let (tid, ts) = (u32::MAX, u64::MAX);
        let alloc = GpuAlloc {
            addr: u64::MAX,
            size: u64::MAX - 1,
            device: UNKNOWN_DEVICE,
            space: gpu_space::MANAGED,
            depth: u32::MAX,
        };
        let r = Record::gpu_alloc(tid, ts, alloc);
        assert_eq!(r.as_gpu_alloc(), Some(alloc));
        assert_eq!((r.tid, r.ts_ns), (tid, ts));
        assert_eq!(r.as_gpu_free(), None);
        let free = GpuFree {
            addr: 7,
            space: gpu_space::PINNED,
        };
        assert_eq!(Record::gpu_free(tid, ts, free).as_gpu_free(), Some(free));
        for synchronous in [false, true] {
            let copy = GpuCopy {
                bytes: u64::MAX,
                direction: gpu_copy::DEVICE_TO_HOST,
                synchronous,
                depth: 128,
            };
            let r = Record::gpu_copy(tid, ts, copy);
            assert_eq!(r.as_gpu_copy(), Some(copy));
            assert_eq!(r.as_gpu_launch(), None);
        }
        let launch = GpuLaunch {
            weight: u64::MAX,
            depth: 3,
            external: 1 << 63,
        };
        let r = Record::gpu_launch(tid, ts, launch);
        assert_eq!(r.as_gpu_launch(), Some(launch));
        assert_eq!(Kind::from_u16(r.kind), Some(Kind::GpuLaunch));
        assert_eq!(r.as_gpu_alloc(), None);
    }
}
