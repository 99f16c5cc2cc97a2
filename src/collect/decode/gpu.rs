//! Decoding the CUDA-call records (`mlprof_wire::gpu`): an allocation, a copy or a launch
//! sample, each followed by its frames; its sizes checked against what a real process could
//! produce before anything is kept.

use mlprof_wire::gpu::UNKNOWN_DEVICE;
use mlprof_wire::{gpu_copy, gpu_space, GpuKernel, Kind, Record};

use super::{Decoder, Pending, MAX_RECORD_BYTES};
use crate::collect::gpu_calls::Call;
use crate::recording::GpuAllocEvent;

/// Most launches one launch sample may stand for (a sampling mean beyond a million is not
/// one the preload library uses).
const MAX_LAUNCH_WEIGHT: u64 = 1 << 20;

impl Decoder {
    /// A CUDA-call record ([`Kind::GpuAlloc`], [`Kind::GpuCopy`], [`Kind::GpuLaunch`]).
    pub(super) fn gpu(&mut self, r: &Record, t_ns: u64) {
        let read = match Kind::from_u16(r.kind) {
            Some(Kind::GpuAlloc) => r.as_gpu_alloc().and_then(|a| {
                let valid = a.size <= MAX_RECORD_BYTES && a.space <= gpu_space::LAST;
                let call = Call::Alloc(GpuAllocEvent {
                    t_ns,
                    tid: r.tid,
                    addr: a.addr,
                    size: a.size,
                    device: (a.device != UNKNOWN_DEVICE).then_some(a.device),
                    space: a.space,
                    frames: Vec::new(),
                    freed_ns: None,
                });
                valid.then_some((call, a.depth))
            }),
            Some(Kind::GpuCopy) => r.as_gpu_copy().and_then(|c| {
                let valid = c.bytes <= MAX_RECORD_BYTES && c.direction <= gpu_copy::UNKNOWN;
                let call = Call::Copy {
                    tid: r.tid,
                    direction: c.direction,
                    bytes: c.bytes,
                    synchronous: c.synchronous,
                    t_ns,
                };
                valid.then_some((call, c.depth))
            }),
            Some(Kind::GpuLaunch) => r.as_gpu_launch().and_then(|l| {
                let valid = (1..=MAX_LAUNCH_WEIGHT).contains(&l.weight);
                let call = Call::Launch {
                    tid: r.tid,
                    launches: l.weight,
                    external: l.external,
                    t_ns,
                };
                valid.then_some((call, l.depth))
            }),
            _ => None,
        };
        let Some((call, depth)) = read else {
            self.out.malformed += 1;
            return;
        };
        let Some(depth) = self.depth(depth) else {
            return;
        };
        self.pending = Pending::Gpu {
            call,
            frames: Vec::with_capacity(depth),
            frames_left: depth,
        };
        if depth == 0 {
            self.finish_pending();
        }
    }
}

impl Decoder {
    /// A kernel-trace record ([`Kind::GpuKernel`], [`Kind::GpuCorrelation`],
    /// [`Kind::GpuKernelName`], [`Kind::GpuTrace`]); times made relative to `launch_ns`.
    pub(super) fn gpu_kernels(&mut self, r: &Record, launch_ns: u64) {
        let t_ns = r.ts_ns.saturating_sub(launch_ns);
        let valid = match Kind::from_u16(r.kind) {
            Some(Kind::GpuKernel) => r
                .as_gpu_kernel()
                .filter(|k| k.end_ns >= k.start_ns)
                .is_some_and(|k| {
                    // On the launch clock, its duration kept (one that began before the launch
                    // starts at 0).
                    let start_ns = k.start_ns.saturating_sub(launch_ns);
                    let k = GpuKernel {
                        start_ns,
                        end_ns: start_ns.saturating_add(k.end_ns - k.start_ns),
                        ..k
                    };
                    self.out.gpu.kernel(&k)
                }),
            Some(Kind::GpuCorrelation) => r
                .as_gpu_correlation()
                .map(|c| self.out.gpu.correlation(c))
                .is_some(),
            Some(Kind::GpuKernelName) => r
                .as_gpu_kernel_name()
                .map(|(key, len)| {
                    self.pending = Pending::KernelName {
                        key,
                        len,
                        bytes: Vec::with_capacity(len),
                    };
                    if len == 0 {
                        self.finish_pending();
                    }
                })
                .is_some(),
            Some(Kind::GpuTrace) => r
                .as_gpu_trace()
                .map(|(state, detail)| self.out.gpu.kernel_trace(state, detail, t_ns))
                .is_some(),
            _ => false,
        };
        if !valid {
            self.out.malformed += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use mlprof_wire::{region_phase, Frame, GpuAlloc, GpuCopy, GpuFree, GpuLaunch};

    use super::*;

    #[test]
    fn cuda_calls_are_decoded_with_their_frames_and_nonsense_is_dropped() {
        let mut d = Decoder::default();
        let alloc = GpuAlloc {
            addr: 0x6000,
            size: 1 << 30,
            device: 1,
            space: gpu_space::DEVICE,
            depth: 2,
        };
        d.feed(&Record::gpu_alloc(7, 100, alloc), 0);
        let frames = [
            Frame {
                code_id: 3,
                lasti: 4,
            },
            Frame {
                code_id: 5,
                lasti: 6,
            },
        ];
        d.feed(&Record::frames(7, &frames), 0);
        let copy = GpuCopy {
            bytes: 4096,
            direction: gpu_copy::HOST_TO_DEVICE,
            synchronous: true,
            depth: 0,
        };
        d.feed(&Record::gpu_copy(7, 200, copy), 0);
        d.feed(
            &Record::gpu_launch(
                7,
                300,
                GpuLaunch {
                    weight: 16,
                    depth: 0,
                    external: 0,
                },
            ),
            0,
        );
        let freed = GpuFree {
            addr: 0x6000,
            space: gpu_space::DEVICE,
        };
        d.feed(&Record::gpu_free(7, 400, freed), 0);
        // Nonsense: a size beyond any address space, an unknown direction, a zero weight.
        let huge = GpuAlloc {
            size: u64::MAX,
            ..alloc
        };
        d.feed(&Record::gpu_alloc(7, 500, huge), 0);
        let odd = GpuCopy {
            direction: 9,
            ..copy
        };
        d.feed(&Record::gpu_copy(7, 500, odd), 0);
        d.feed(
            &Record::gpu_launch(
                7,
                500,
                GpuLaunch {
                    weight: 0,
                    depth: 0,
                    external: 0,
                },
            ),
            0,
        );
        d.finish_pending();
        assert_eq!(d.out.malformed, 3);
        let calls = d.out.gpu.take();
        assert_eq!(calls.allocs.len(), 1);
        let a = &calls.allocs[0];
        assert_eq!(
            (a.addr, a.size, a.device, a.tid),
            (0x6000, 1 << 30, Some(1), 7)
        );
        assert_eq!(
            (a.frames.clone(), a.freed_ns),
            (vec![(3, 4), (5, 6)], Some(400))
        );
        assert_eq!(
            (calls.copies[0].bytes, calls.copies[0].synchronous_calls),
            (4096, 1)
        );
        assert_eq!(calls.launches[0].launches, 16);
    }

    #[test]
    fn a_regions_begin_and_end_part_the_copies_of_one_stack() {
        let mut d = Decoder::default();
        let copy = GpuCopy {
            bytes: 10,
            direction: gpu_copy::HOST_TO_DEVICE,
            synchronous: false,
            depth: 0,
        };
        let region = |phase| mlprof_wire::Region {
            id: 1,
            phase,
            report: 0,
            name_len: 0,
            heap: 0,
            peak: 0,
        };
        d.feed(&Record::gpu_copy(7, 100, copy), 0);
        d.feed(&Record::region(7, 150, region(region_phase::BEGIN)), 0);
        d.feed(&Record::gpu_copy(7, 200, copy), 0);
        d.feed(&Record::gpu_copy(7, 210, copy), 0);
        d.feed(&Record::region(7, 250, region(region_phase::END)), 0);
        d.feed(&Record::gpu_copy(7, 300, copy), 0);
        d.finish_pending();
        let rows: Vec<_> = d
            .out
            .gpu
            .take()
            .copies
            .iter()
            .map(|c| (c.bytes, c.first_ns, c.last_ns))
            .collect();
        assert_eq!(rows, [(10, 100, 100), (20, 200, 210), (10, 300, 300)]);
    }

    #[test]
    fn kernel_records_are_joined_named_and_put_on_the_launch_clock() {
        use mlprof_wire::{gpu_trace, GpuCorrelation, GpuKernel, DATA_BYTES};
        let mut d = Decoder::default();
        let launch = GpuLaunch {
            weight: 1,
            depth: 1,
            external: 5,
        };
        d.feed(&Record::gpu_launch(7, 1_100, launch), 1_000);
        d.feed(
            &Record::frames(
                7,
                &[Frame {
                    code_id: 3,
                    lasti: 4,
                }],
            ),
            1_000,
        );
        d.feed(&Record::gpu_trace(9, 1_150, gpu_trace::ON, 130202), 1_000);
        let c = GpuCorrelation {
            external: 5,
            correlation: 42,
        };
        d.feed(&Record::gpu_correlation(9, 1_200, c), 1_000);
        let name = b"a_kernel_whose_name_takes_more_than_one_data_record";
        d.feed(
            &Record::gpu_kernel_name(9, 1_200, 0xfeed, name.len()),
            1_000,
        );
        for chunk in name.chunks(DATA_BYTES) {
            let mut bytes = [0u8; DATA_BYTES];
            bytes[..chunk.len()].copy_from_slice(chunk);
            d.feed(&Record::data(&bytes), 1_000);
        }
        let k = GpuKernel {
            start_ns: 1_300,
            end_ns: 1_800,
            device: 1,
            stream: 2,
            correlation: 42,
            name: 0xfeed,
        };
        d.feed(&Record::gpu_kernel(9, 2_000, k), 1_000);
        // Nonsense: a kernel ending before it began, a state that does not exist.
        let backwards = GpuKernel { end_ns: 1_000, ..k };
        d.feed(&Record::gpu_kernel(9, 2_000, backwards), 1_000);
        d.feed(&Record::gpu_trace(9, 2_000, 77, 0), 1_000);
        d.finish_pending();
        assert_eq!(d.out.malformed, 2);
        let kernels = d.out.gpu.take().kernels;
        assert_eq!(kernels.state, Some((gpu_trace::ON, 130202)));
        assert_eq!(kernels.name(0), String::from_utf8_lossy(name));
        assert_eq!((kernels.all[0].kernels, kernels.all[0].device_ns), (1, 500));
        let row = &kernels.sampled[0];
        assert_eq!(
            (row.frames.as_slice(), row.device, row.first_ns),
            (&[(3, 4)][..], 1, 100)
        );
    }
}
