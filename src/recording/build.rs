//! A hand-made [`Recording`] for unit tests of the later stages: one CPython 3.10 process
//! (pid 100), code objects whose code units map to given lines, CPU and waiting samples,
//! sampled allocations, peak marks and GPU polls, at millisecond times. What the model makes
//! of it can then be checked against figures known by construction, without a live process.

use super::gpu::{GpuDeviceInfo, GpuPoll, GpuProcessReading, GpuRecording};
use super::{AllocSample, ChannelSummary, CodeInfo, CpuSample, Recording};

/// The one process's pid (and its main thread's tid).
pub const PID: u32 = 100;

const MS: u64 = 1_000_000;

/// Builds a [`Recording`] of one process.
pub struct RecordingBuilder {
    rec: Recording,
}

impl RecordingBuilder {
    /// A process that ran `wall_ms` and exited with 0.
    pub fn new(wall_ms: u64) -> RecordingBuilder {
        let channel = ChannelSummary {
            pid: PID,
            ppid: 1,
            command: vec!["python".into(), "t.py".into()],
            python: Some("3.10.13".into()),
            exit_code: Some(0),
            exit_ns: Some(wall_ms * MS),
            sample_interval_ns: 10 * MS,
            ..ChannelSummary::default()
        };
        let mut rec = Recording {
            command: channel.command.clone(),
            wall_ns: wall_ms * MS,
            child_pid: PID,
            channels: vec![channel],
            ..Recording::default()
        };
        rec.exit.code = Some(0);
        RecordingBuilder { rec }
    }

    fn channel(&mut self) -> &mut ChannelSummary {
        &mut self.rec.channels[0]
    }

    /// Code object `id` of function `qualname` in `file`, starting at `firstlineno`: code
    /// unit `i` runs line `lines[i]` (a CPython 3.10 line table, byte deltas of one unit).
    pub fn code(
        mut self,
        id: u32,
        file: &str,
        qualname: &str,
        firstlineno: i32,
        lines: &[i32],
    ) -> Self {
        let mut table = Vec::new();
        let mut line = firstlineno;
        for &next in lines {
            let delta = i8::try_from(next - line).expect("line steps fit a 3.10 table entry");
            table.extend_from_slice(&[2, delta as u8]);
            line = next;
        }
        let info = CodeInfo {
            firstlineno,
            filename: file.into(),
            qualname: qualname.into(),
            linetable: table,
            filename_kind: 1,
            qualname_kind: 1,
            address: 0x1000 * u64::from(id),
        };
        self.channel().codes.insert(id, info);
        self
    }

    /// A CPU sample of `weight_ms` on thread `tid` ending at `t_ms`, interrupted at `ip`, with
    /// Python frames `(code id, code unit)` innermost first.
    pub fn cpu(
        mut self,
        t_ms: u64,
        tid: u32,
        ip: u64,
        weight_ms: u64,
        frames: &[(u32, i32)],
    ) -> Self {
        self.channel().samples.push(CpuSample {
            t_ns: t_ms * MS,
            tid,
            ip,
            weight_ns: weight_ms * MS,
            flags: 0,
            frames: frames.to_vec(),
            caller: 0,
            fault_ns: 0,
        });
        self
    }

    /// An off-CPU (waiting) sample, as the collector takes them from outside.
    pub fn waiting(mut self, t_ms: u64, tid: u32, weight_ms: u64, frames: &[(u32, i32)]) -> Self {
        self.channel().samples.push(CpuSample {
            t_ns: t_ms * MS,
            tid,
            ip: 0,
            weight_ns: weight_ms * MS,
            flags: mlprof_wire::sample_flags::WAITING,
            frames: frames.to_vec(),
            caller: 0,
            fault_ns: 0,
        });
        self
    }

    /// A sampled allocation at `t_ms` standing for `weight` bytes, freed at `freed_ms` if
    /// given; `python`: made through Python's allocator.
    pub fn alloc(
        mut self,
        t_ms: u64,
        addr: u64,
        weight: u64,
        frames: &[(u32, i32)],
        freed_ms: Option<u64>,
        python: bool,
    ) -> Self {
        self.channel().allocs.push(AllocSample {
            t_ns: t_ms * MS,
            tid: PID,
            addr,
            size: weight,
            weight,
            flags: if python {
                mlprof_wire::alloc_flags::PYTHON
            } else {
                0
            },
            frames: frames.to_vec(),
            freed_ns: freed_ms.map(|t| t * MS),
            cut_ns: None,
        });
        self
    }

    /// The heap reached `heap_bytes` at `t_ms` (a peak mark; the last one is the peak).
    pub fn peak_mark(mut self, t_ms: u64, heap_bytes: u64) -> Self {
        let c = self.channel();
        c.peak_marks.push((t_ms * MS, heap_bytes));
        c.heap_peak = c.heap_peak.max(heap_bytes as i64);
        self
    }

    /// An NVML poll at `t_ms`: the process on device 0 with `memory_bytes` of GPU memory and
    /// `util_pct` SM utilisation over the interval the poll ends.
    pub fn gpu_poll(mut self, t_ms: u64, memory_bytes: u64, util_pct: u32) -> Self {
        let gpu = &mut self.rec.gpu;
        if !gpu.available {
            *gpu = GpuRecording {
                available: true,
                devices: vec![GpuDeviceInfo {
                    index: 0,
                    name: "Test GPU".into(),
                    memory_total: 16 << 30,
                }],
                process_util: true,
                ..GpuRecording::default()
            };
        }
        gpu.polls.push(GpuPoll {
            t_ns: t_ms * MS,
            devices: Vec::new(),
            processes: vec![GpuProcessReading {
                device: 0,
                pid: PID,
                memory_bytes,
                sm_util_pct: Some(util_pct),
                visible: true,
            }],
        });
        self
    }

    /// The recording.
    pub fn build(self) -> Recording {
        self.rec
    }
}
