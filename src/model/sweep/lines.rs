//! One line of a sweep: its figures in each run and the growth law of each (bytes held at the
//! heap peak, bytes allocated, time; through CUDA calls, device memory held at the GPU peak
//! and reserved; and the GPU time of the kernels it launched). Pure.

use serde::{Deserialize, Serialize};

use super::{fit, Growth, Outcome};
use crate::model::{LineStats, Profile};

/// A line's figures across the runs and their growth.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LineGrowth {
    /// Source file.
    pub file: String,
    /// Line number.
    pub line: u32,
    /// Enclosing function.
    pub function: String,
    /// Source text.
    pub source: String,
    /// Exponent of bytes held at the peak.
    pub memory_exponent: Option<f64>,
    /// R² of that fit.
    pub memory_r2: Option<f64>,
    /// Its constant.
    pub memory_constant: Option<f64>,
    /// Exponent of bytes allocated.
    pub alloc_exponent: Option<f64>,
    /// R² of that fit.
    pub alloc_r2: Option<f64>,
    /// Exponent of time (Python + native + waiting).
    pub cpu_exponent: Option<f64>,
    /// R² of that fit.
    pub cpu_r2: Option<f64>,
    /// Bytes held at the peak, per value (null for a failed run).
    pub peak_bytes: Vec<Option<u64>>,
    /// Bytes allocated, per value.
    pub alloc_bytes: Vec<Option<u64>>,
    /// Seconds, per value.
    pub cpu_s: Vec<Option<f64>>,
    /// Bytes held at the peak projected to the `--project` value.
    pub projected_peak_bytes: Option<u64>,
    /// Exponent of the device memory its CUDA allocations still held at the GPU peak
    /// (`gpu_peak_bytes`; exact, so every run where it is above 0 is a point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_peak_exponent: Option<f64>,
    /// R² of that fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_peak_r2: Option<f64>,
    /// Its constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_peak_constant: Option<f64>,
    /// Exponent of the device memory its CUDA allocations reserved (`gpu_reserved_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_reserved_exponent: Option<f64>,
    /// R² of that fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_reserved_r2: Option<f64>,
    /// Device memory held at the GPU peak, per value (null for a failed run; empty when the
    /// line reserved no device memory in any run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_peak_bytes: Vec<Option<u64>>,
    /// Device memory reserved, per value (empty as `gpu_peak_bytes` is).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_reserved_bytes: Vec<Option<u64>>,
    /// Device memory held at the GPU peak projected to the `--project` value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projected_gpu_peak_bytes: Option<u64>,
    /// Exponent of its GPU time (device seconds of the kernels it launched, CUPTI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_time_exponent: Option<f64>,
    /// R² of that fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_time_r2: Option<f64>,
    /// GPU time, per value (null for a failed run; empty when the line had none in any run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_kernel_s: Vec<Option<f64>>,
    /// Exponent of its PyTorch tensors at the GPU peak (the allocator's trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_tensor_exponent: Option<f64>,
    /// R² of that fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_tensor_r2: Option<f64>,
    /// Its tensors at the GPU peak, per value (null for a failed run; empty when the line had
    /// none in any run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_tensor_peak_bytes: Vec<Option<u64>>,
}

impl LineGrowth {
    /// The most it held or would hold, on the host or a GPU (for ordering lines).
    pub fn size(&self) -> u64 {
        let most = |projected: Option<u64>, per_run: &[Option<u64>]| {
            projected.unwrap_or_else(|| per_run.iter().flatten().copied().max().unwrap_or(0))
        };
        most(self.projected_peak_bytes, &self.peak_bytes)
            .max(most(self.projected_gpu_peak_bytes, &self.gpu_peak_bytes))
            .max(most(None, &self.gpu_tensor_peak_bytes))
    }
}

/// One figure of a line across the runs: its value in each (`None` for a failed run) and the
/// points worth fitting.
#[derive(Default)]
struct Series {
    per_run: Vec<Option<f64>>,
    points: Vec<(f64, f64)>,
}

impl Series {
    /// A run's value `y` at parameter `x`; a point when at least `floor` (and above 0).
    fn add(&mut self, x: f64, y: f64, floor: f64) {
        self.per_run.push(Some(y));
        if y >= floor && y > 0.0 {
            self.points.push((x, y));
        }
    }

    fn failed(&mut self) {
        self.per_run.push(None);
    }

    fn bytes(&self) -> Vec<Option<u64>> {
        self.per_run.iter().map(|v| v.map(|b| b as u64)).collect()
    }

    fn fit(&self) -> Growth {
        fit(&self.points)
    }
}

/// GPU time below this is too small to fit (seconds).
const GPU_TIME_FLOOR_S: f64 = 0.001;

/// Figures below these are too small to fit (too few samples): bytes, seconds.
fn floors(p: &Profile) -> (f64, f64) {
    let m = if p.memory_sample_bytes > 0 {
        p.memory_sample_bytes
    } else {
        crate::launch::DEFAULT_MEMORY_SAMPLE_BYTES
    } as f64;
    let t = if p.sample_interval_s > 0.0 {
        p.sample_interval_s
    } else {
        1.0 / f64::from(crate::launch::DEFAULT_RATE_HZ)
    };
    (4.0 * m, 2.0 * t)
}

/// The line `first` (as a good run has it) across `outcomes`, fitted and projected to
/// `project`.
pub fn line(
    first: &LineStats,
    outcomes: &[Outcome],
    ok: &dyn Fn(&Outcome) -> bool,
    project: Option<f64>,
) -> LineGrowth {
    let [mut peak, mut alloc, mut cpu, mut gpu_peak, mut gpu_reserved, mut gpu_time, mut tensors] =
        std::array::from_fn(|_| Series::default());
    for o in outcomes {
        let p = match (&o.profile, ok(o)) {
            (Some(p), true) => p,
            _ => {
                for s in [
                    &mut peak,
                    &mut alloc,
                    &mut cpu,
                    &mut gpu_peak,
                    &mut gpu_reserved,
                    &mut gpu_time,
                    &mut tensors,
                ] {
                    s.failed();
                }
                continue;
            }
        };
        let (byte_floor, time_floor) = floors(p);
        let m = p
            .lines
            .iter()
            .find(|l| l.line == first.line && l.file == first.file)
            .map(|l| l.measures.clone())
            .unwrap_or_default();
        let x = o.value;
        peak.add(x, m.peak_bytes as f64, byte_floor);
        alloc.add(x, m.alloc_bytes as f64, byte_floor);
        cpu.add(x, m.time_s(), time_floor);
        // Exact figures: every byte is a measure.
        gpu_peak.add(x, m.gpu_calls.gpu_peak_bytes as f64, 1.0);
        gpu_reserved.add(x, m.gpu_calls.gpu_reserved_bytes as f64, 1.0);
        // A line's GPU time is its share of exact totals by sampled launches (exact for a
        // kernel only it launches): below 1 ms a share is too noisy to fit.
        gpu_time.add(x, m.gpu_calls.gpu_kernel_s, GPU_TIME_FLOOR_S);
        // Exact: the allocator's block sizes.
        tensors.add(x, m.gpu_tensor_peak_bytes as f64, 1.0);
    }
    let tensor_fit = tensors.fit();
    let any_tensors = tensors.per_run.iter().flatten().any(|&b| b > 0.0);
    let (mem, al, c) = (peak.fit(), alloc.fit(), cpu.fit());
    let (gpu_held, gpu_res) = (gpu_peak.fit(), gpu_reserved.fit());
    let any_gpu = gpu_reserved.per_run.iter().flatten().any(|&b| b > 0.0);
    let gpu_bytes = |s: &Series| if any_gpu { s.bytes() } else { Vec::new() };
    let gpu_t = gpu_time.fit();
    let any_gpu_time = gpu_time.per_run.iter().flatten().any(|&t| t > 0.0);
    LineGrowth {
        file: first.file.clone(),
        line: first.line,
        function: first.function.clone(),
        source: first.source.clone(),
        memory_exponent: mem.exponent,
        memory_r2: mem.r2,
        memory_constant: mem.constant,
        alloc_exponent: al.exponent,
        alloc_r2: al.r2,
        cpu_exponent: c.exponent,
        cpu_r2: c.r2,
        peak_bytes: peak.bytes(),
        alloc_bytes: alloc.bytes(),
        cpu_s: cpu.per_run,
        projected_peak_bytes: project.and_then(|x| mem.at(x)).map(|v| v as u64),
        gpu_peak_exponent: gpu_held.exponent,
        gpu_peak_r2: gpu_held.r2,
        gpu_peak_constant: gpu_held.constant,
        gpu_reserved_exponent: gpu_res.exponent,
        gpu_reserved_r2: gpu_res.r2,
        gpu_peak_bytes: gpu_bytes(&gpu_peak),
        gpu_reserved_bytes: gpu_bytes(&gpu_reserved),
        projected_gpu_peak_bytes: project
            .and_then(|x| gpu_held.at(x))
            .map(|v| v.round() as u64),
        gpu_time_exponent: gpu_t.exponent,
        gpu_time_r2: gpu_t.r2,
        gpu_kernel_s: if any_gpu_time {
            gpu_time.per_run
        } else {
            Vec::new()
        },
        gpu_tensor_exponent: tensor_fit.exponent,
        gpu_tensor_r2: tensor_fit.r2,
        gpu_tensor_peak_bytes: if any_tensors {
            tensors.bytes()
        } else {
            Vec::new()
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::profile::GpuLineCalls;
    use crate::model::sweep::analyze;

    const MIB: u64 = 1 << 20;

    fn run(n: u64) -> Outcome {
        let mut p = Profile::default();
        p.exit.code = Some(0);
        let line = |line: u32, gpu_calls: GpuLineCalls| {
            let mut l = LineStats {
                file: "t.py".into(),
                line,
                ..LineStats::default()
            };
            l.measures.gpu_calls = gpu_calls;
            l
        };
        // Line 3 holds N MiB; line 4 N² MiB; line 5 reserves N MiB and gives it back.
        p.lines = vec![
            line(
                3,
                GpuLineCalls {
                    gpu_reserved_bytes: n * MIB,
                    gpu_peak_bytes: n * MIB,
                    ..GpuLineCalls::default()
                },
            ),
            line(
                4,
                GpuLineCalls {
                    gpu_reserved_bytes: n * n * MIB,
                    gpu_peak_bytes: n * n * MIB,
                    ..GpuLineCalls::default()
                },
            ),
            line(
                5,
                GpuLineCalls {
                    gpu_reserved_bytes: n * MIB,
                    gpu_freed_bytes: n * MIB,
                    ..GpuLineCalls::default()
                },
            ),
            line(6, GpuLineCalls::default()),
            // Line 7 launches kernels whose GPU time grows as N^1.5.
            line(
                7,
                GpuLineCalls {
                    gpu_kernel_s: 0.001 * (n as f64).powf(1.5),
                    gpu_kernels: n,
                    ..GpuLineCalls::default()
                },
            ),
        ];
        Outcome {
            text: n.to_string(),
            value: n as f64,
            fixed: BTreeMap::new(),
            profile: Some(p),
            path: None,
            error: None,
        }
    }

    #[test]
    fn gpu_memory_gets_exponents_from_its_exact_figures() {
        let s = analyze("N", BTreeMap::new(), &[run(2), run(4), run(8)], Some(16.0));
        let at = |n: u32| s.lines.iter().find(|l| l.line == n).unwrap();
        let near = |k: Option<f64>, want: f64| (k.unwrap() - want).abs() < 1e-9;
        assert!(near(at(3).gpu_peak_exponent, 1.0), "{:?}", at(3));
        assert!(near(at(3).gpu_reserved_exponent, 1.0));
        assert!(near(at(4).gpu_peak_exponent, 2.0), "{:?}", at(4));
        assert!(near(at(4).gpu_reserved_exponent, 2.0));
        assert_eq!(at(4).projected_gpu_peak_bytes, Some(256 * MIB));
        assert_eq!(
            at(4).gpu_peak_bytes,
            [Some(4 * MIB), Some(16 * MIB), Some(64 * MIB)]
        );
        // Reserved and given back: reserved grows, nothing held at the peak to fit.
        assert!(near(at(5).gpu_reserved_exponent, 1.0));
        assert_eq!(at(5).gpu_peak_exponent, None);
        // Without CUDA calls: no GPU figures at all, not a row of zeros.
        assert!(at(6).gpu_peak_bytes.is_empty() && at(6).gpu_reserved_exponent.is_none());
        // Largest held (projected) first: the square line.
        assert_eq!(s.lines[0].line, 4);
        // GPU time gets its own law; a line without any has none.
        assert!(near(at(7).gpu_time_exponent, 1.5), "{:?}", at(7));
        assert_eq!(at(7).gpu_kernel_s.len(), 3);
        assert!(at(6).gpu_kernel_s.is_empty() && at(6).gpu_time_exponent.is_none());
    }
}
