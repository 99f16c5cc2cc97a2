//! `mlprof sweep`: profiles of one command at several values of a parameter, and per line a
//! growth law fitted on log-log axes (`y = c * x^k`: the exponent `k`, the constant `c` and the
//! fit's R²) for bytes held at the heap peak, bytes allocated and time, and for the device
//! memory its CUDA calls held at the GPU peak and reserved (`lines`); projections of each line
//! and of the whole peak to a value not run. Pure: the runs are made by the CLI.
//!
//! A figure too small to be measured well (under four sampling means of bytes, two CPU samples)
//! is left out of its line's fit; a fit needs two such points. The whole peak at a projected
//! value is the peak of the largest run plus, for each line with a memory fit, its projected
//! growth beyond what it held there (what does not grow stays as it was).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{LineStats, Profile};

mod lines;
pub use lines::LineGrowth;

/// Schema identifier of a sweep document.
pub const SCHEMA: &str = "mlprof-sweep/1";

/// Lines a sweep document keeps (those with the largest figures).
const LINES_KEPT: usize = 200;

/// One run of the sweep, as the CLI made it.
pub struct Outcome {
    /// The parameter's value, as given.
    pub text: String,
    /// The value as a number.
    pub value: f64,
    /// The values of the other parameters in this run.
    pub fixed: BTreeMap<String, String>,
    /// The run's profile, when one was written.
    pub profile: Option<Profile>,
    /// Where the profile was kept (`--runs-dir`), if it was.
    pub path: Option<String>,
    /// Why there is no profile, when there is none.
    pub error: Option<String>,
}

/// A sweep over one parameter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The parameter swept.
    pub param: String,
    /// Its values, in the order run.
    pub values: Vec<f64>,
    /// The other parameters, held at their first values.
    pub fixed: BTreeMap<String, String>,
    /// Each run: its status and summary.
    pub runs: Vec<RunSummary>,
    /// The tree's peak heap against the parameter.
    pub peak: Growth,
    /// The tree's GPU memory held through CUDA calls at its peak (each process's devices'
    /// peaks summed) against the parameter; absent without CUDA calls.
    #[serde(default, skip_serializing_if = "Growth::is_none")]
    pub gpu_peak: Growth,
    /// The value projected to (`--project`), if any.
    pub project_value: Option<f64>,
    /// The whole peak projected to `project_value`.
    pub projected_peak_bytes: Option<u64>,
    /// Lines, largest (projected, else largest measured) peak first, on the host or a GPU.
    pub lines: Vec<LineGrowth>,
    /// Sweeps of the other parameters (`--param` given more than once), each around the first
    /// values of the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more: Vec<Sweep>,
}

/// Whether a run of a sweep succeeded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Exit 0 (`"ok"`).
    #[default]
    Ok,
    /// A non-zero exit, a signal, or no profile (`"failed"`).
    Failed,
}

impl RunStatus {
    /// The name the sweep document gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
        }
    }
}

/// How one run went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The parameter's value.
    pub value: f64,
    /// Whether it succeeded: failed runs are reported and left out of the fits.
    pub status: RunStatus,
    /// Exit code of the command.
    pub exit_code: Option<i32>,
    /// Signal that ended the command.
    pub exit_signal: Option<i32>,
    /// Why the run failed, in words.
    pub reason: Option<String>,
    /// Peak heap of the tree (as far as it got, for a failed run).
    pub peak_heap_bytes: u64,
    /// Peak RSS of the tree.
    pub peak_rss_bytes: u64,
    /// GPU memory the tree's CUDA calls held at its peak (each process's devices' peaks
    /// summed); absent (0) without CUDA calls.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_peak_bytes: u64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// The run's profile, when kept (`--runs-dir`).
    pub profile: Option<String>,
}

/// A power law fitted to one figure: `y = constant * x^exponent`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Growth {
    /// The exponent (1: linear, 2: quadratic); absent when fewer than two runs measured it.
    pub exponent: Option<f64>,
    /// Goodness of the fit on log-log axes (1 with exactly two points).
    pub r2: Option<f64>,
    /// The fitted constant.
    pub constant: Option<f64>,
}

impl Growth {
    /// Whether nothing was fitted.
    pub fn is_none(&self) -> bool {
        self.exponent.is_none()
    }

    /// The fitted figure at `x`.
    pub fn at(&self, x: f64) -> Option<f64> {
        Some(self.constant? * x.powf(self.exponent?))
    }
}

/// Least squares on log-log axes over the points with `y > 0`.
pub fn fit(points: &[(f64, f64)]) -> Growth {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    let n = pts.len() as f64;
    let distinct = pts.iter().any(|p| (p.0 - pts[0].0).abs() > 1e-12);
    if pts.len() < 2 || !distinct {
        return Growth::default();
    }
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let k = sxy / sxx;
    let c = (my - k * mx).exp();
    let r2 = if syy <= 1e-24 {
        1.0
    } else {
        (sxy * sxy / (sxx * syy)).clamp(0.0, 1.0)
    };
    Growth {
        exponent: Some(k),
        r2: Some(r2),
        constant: Some(c),
    }
}

/// The sweep of `param` from its runs (in value order), projected to `project` if given.
pub fn analyze(
    param: &str,
    fixed: BTreeMap<String, String>,
    outcomes: &[Outcome],
    project: Option<f64>,
) -> Sweep {
    let ok = |o: &Outcome| {
        o.profile
            .as_ref()
            .is_some_and(|p| p.exit.code == Some(0) && p.exit.signal.is_none())
    };
    let runs: Vec<RunSummary> = outcomes.iter().map(|o| summary(o, ok(o))).collect();
    let good: Vec<(f64, &Profile)> = outcomes
        .iter()
        .filter(|o| ok(o))
        .filter_map(|o| Some((o.value, o.profile.as_ref()?)))
        .collect();
    let peak = fit(&good
        .iter()
        .map(|(x, p)| (*x, p.memory.peak_heap_bytes as f64))
        .collect::<Vec<_>>());
    let gpu_peak = fit(&good
        .iter()
        .map(|(x, p)| (*x, gpu_peak_bytes(p) as f64))
        .collect::<Vec<_>>());
    // Every line seen in a good run, by place.
    let mut places: BTreeMap<(String, u32), &LineStats> = BTreeMap::new();
    for (_, p) in &good {
        for l in p.lines.iter().filter(|l| l.line > 0) {
            places.entry((l.file.clone(), l.line)).or_insert(l);
        }
    }
    let mut lines: Vec<LineGrowth> = places
        .values()
        .map(|l| lines::line(l, outcomes, &ok, project))
        .collect();
    lines.sort_by(|a, b| {
        b.size().cmp(&a.size()).then_with(|| {
            let cpu = |l: &LineGrowth| l.cpu_s.iter().flatten().copied().fold(0.0, f64::max);
            cpu(b).total_cmp(&cpu(a))
        })
    });
    lines.truncate(LINES_KEPT);
    let projected_peak_bytes = project.and_then(|_| projected_peak(&good, &lines));
    Sweep {
        schema: SCHEMA.to_string(),
        param: param.to_string(),
        values: outcomes.iter().map(|o| o.value).collect(),
        fixed,
        runs,
        peak,
        gpu_peak,
        project_value: project,
        projected_peak_bytes,
        lines,
        more: Vec::new(),
    }
}

fn summary(o: &Outcome, ok: bool) -> RunSummary {
    let p = o.profile.as_ref();
    let (code, signal) = p.map_or((None, None), |p| (p.exit.code, p.exit.signal));
    let reason = if ok {
        None
    } else if let Some(e) = &o.error {
        Some(e.clone())
    } else {
        Some(match (code, signal) {
            (_, Some(s)) => format!("killed by signal {s}{}", signal_name(s)),
            (Some(c), _) => format!("exit {c}"),
            _ => "no exit status".into(),
        })
    };
    RunSummary {
        value: o.value,
        status: if ok { RunStatus::Ok } else { RunStatus::Failed },
        exit_code: code,
        exit_signal: signal,
        reason,
        peak_heap_bytes: p.map_or(0, |p| p.memory.peak_heap_bytes),
        peak_rss_bytes: p.map_or(0, |p| p.memory.peak_rss_bytes),
        gpu_peak_bytes: p.map_or(0, gpu_peak_bytes),
        wall_s: p.map_or(0.0, |p| p.wall_s),
        profile: o.path.clone(),
    }
}

/// The tree's GPU memory held through CUDA calls at its peak: each process's devices' peaks.
fn gpu_peak_bytes(p: &Profile) -> u64 {
    let processes = p.processes.iter().filter_map(|q| q.gpu_calls.as_ref());
    processes.map(|c| c.totals.gpu_peak_bytes).sum()
}

fn signal_name(s: i32) -> &'static str {
    match s {
        9 => " (SIGKILL: out of memory?)",
        6 => " (SIGABRT)",
        11 => " (SIGSEGV)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

/// The whole peak at the projected value: the largest good run's peak, plus each fitted line's projected
/// growth beyond what it held in that run.
fn projected_peak(good: &[(f64, &Profile)], lines: &[LineGrowth]) -> Option<u64> {
    let (_, last) = good.iter().max_by(|a, b| a.0.total_cmp(&b.0))?;
    let mut growth = 0.0;
    for l in lines {
        let Some(projected) = l.projected_peak_bytes else {
            continue;
        };
        let held = last
            .lines
            .iter()
            .find(|m| m.line == l.line && m.file == l.file)
            .map_or(0, |m| m.measures.peak_bytes);
        growth += projected as f64 - held as f64;
    }
    Some((last.memory.peak_heap_bytes as f64 + growth).max(0.0) as u64)
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_law_is_fitted_exactly() {
        let pts: Vec<(f64, f64)> = [1000.0, 2000.0, 4000.0]
            .iter()
            .map(|&n: &f64| (n, 8.0 * n * n))
            .collect();
        let g = fit(&pts);
        assert!((g.exponent.unwrap() - 2.0).abs() < 1e-9);
        assert!((g.r2.unwrap() - 1.0).abs() < 1e-9);
        assert!((g.at(8000.0).unwrap() / (8.0 * 64e6) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_constant_part_pulls_the_exponent_below_the_growing_parts() {
        // 8000 N bytes plus 1.6 MiB made once: fitted as N^0.9, not N^1.
        let pts: Vec<(f64, f64)> = [1000.0, 2000.0, 4000.0]
            .iter()
            .map(|&n: &f64| (n, 8000.0 * n + 1.6 * 1048576.0))
            .collect();
        let k = fit(&pts).exponent.unwrap();
        assert!((0.85..0.95).contains(&k), "{k}");
    }

    #[test]
    fn a_run_killed_for_memory_is_reported_and_left_out_of_the_fits() {
        let run = |n: f64, signal: Option<i32>| {
            let mut p = Profile {
                memory_sample_bytes: 128 << 10,
                ..Default::default()
            };
            p.exit.code = if signal.is_some() { None } else { Some(0) };
            p.exit.signal = signal;
            p.lines.push(LineStats {
                file: "t.py".into(),
                line: 3,
                measures: super::super::Measures {
                    peak_bytes: (8.0 * n * n) as u64,
                    ..Default::default()
                },
                ..Default::default()
            });
            Outcome {
                text: n.to_string(),
                value: n,
                fixed: BTreeMap::new(),
                profile: Some(p),
                path: None,
                error: None,
            }
        };
        let outcomes = [
            run(1000.0, None),
            run(2000.0, None),
            run(4000.0, None),
            run(64000.0, Some(9)),
        ];
        let s = analyze("N", BTreeMap::new(), &outcomes, None);
        assert_eq!(s.runs[3].status, RunStatus::Failed);
        assert!(s.runs[3].reason.as_deref().unwrap().contains("SIGKILL"));
        assert_eq!(s.lines[0].peak_bytes[3], None);
        assert!((s.lines[0].memory_exponent.unwrap() - 2.0).abs() < 1e-6);
    }

    #[test]
    fn a_poor_fit_says_so_and_one_point_is_no_fit() {
        let g = fit(&[(1.0, 10.0), (2.0, 1.0), (4.0, 12.0), (8.0, 2.0)]);
        assert!(g.r2.unwrap() < 0.5, "{g:?}");
        assert_eq!(fit(&[(1.0, 10.0)]), Growth::default());
        assert_eq!(fit(&[(1.0, 10.0), (1.0, 12.0)]), Growth::default());
    }
}
