//! The command line's grammar: every command's arguments (clap), their defaults and the
//! parsers of their values. What the commands do is in `mod.rs` and its siblings.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::{
    budgets, read_profile, sweep, DEFAULT_COPY_SAMPLE, DEFAULT_MEMORY_SAMPLE, DEFAULT_RATE_HZ,
};
use crate::error::Result;
use crate::gate::Gate;
use crate::render::{self, Format};

#[derive(Parser)]
#[command(
    name = "mlprof",
    version,
    about = "Profile CPU, memory and GPU of Python ML programs, per line"
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Profile a command and report when it ends.
    Run(RunArgs),
    /// Render a saved JSON profile again.
    Report(ReportArgs),
    /// Export a saved profile's stacks for other tools.
    Export(ExportArgs),
    /// Check a saved profile against budgets (exit 97 when one is exceeded).
    Check(CheckArgs),
    /// Combine profiles of several hosts or ranks into one, with a per-rank breakdown.
    Merge(MergeArgs),
    /// Compare two saved profiles: per line and function, what changed beyond sampling noise.
    Diff(DiffArgs),
    /// Run a command at several values of a parameter and fit how each line grows with it.
    Sweep(sweep::SweepArgs),
    /// Profile a running Python process from outside (CPU and waiting per line, RSS; no
    /// memory per line), without restarting or stopping it.
    Attach(AttachArgs),
    /// Jupyter: `mlprof jupyter install` registers a kernel that runs under mlprof.
    Jupyter(JupyterArgs),
}

#[derive(Args)]
pub(super) struct JupyterArgs {
    #[command(subcommand)]
    pub(super) action: JupyterAction,
}

#[derive(Subcommand)]
pub(super) enum JupyterAction {
    /// Register the kernel "Python 3 (mlprof)": ipykernel started under `mlprof run`, so that
    /// `%load_ext mlprof` and `%%mlprof` measure every allocation of a cell.
    Install(JupyterInstallArgs),
}

#[derive(Args)]
pub(super) struct JupyterInstallArgs {
    /// Install for this user (Jupyter's user data directory) instead of into the Python
    /// environment.
    #[arg(long)]
    pub(super) user: bool,
    /// The kernel's name (its directory).
    #[arg(long, default_value = "mlprof")]
    pub(super) name: String,
    /// The name Jupyter shows.
    #[arg(long, default_value = "Python 3 (mlprof)")]
    pub(super) display_name: String,
    /// The Python that runs the kernel (default: the one beside this mlprof, else python3 on
    /// PATH); it needs ipykernel.
    #[arg(long, value_name = "PATH")]
    pub(super) python: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct AttachArgs {
    /// Process id of a running CPython (3.9-3.15, free-threaded 3.13t-3.15t).
    pub(super) pid: u32,
    /// Stop after SECONDS (default: at Ctrl-C, or when the process ends).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub(super) duration: Option<f64>,
    /// Samples per second (at most 10000, as `run`).
    #[arg(long, value_name = "HZ", default_value_t = DEFAULT_RATE_HZ)]
    pub(super) rate: u32,
    #[command(flatten)]
    pub(super) format: FormatArgs,
    /// Write the report to FILE (format from --text/--json/--html, else from the extension).
    #[arg(short, long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
    /// Attribute time to any file, the standard library and installed packages included.
    #[arg(long)]
    pub(super) profile_all: bool,
    /// Count every thread's waiting on its lines.
    #[arg(long)]
    pub(super) idle: bool,
    /// Leave out the hints (suggestions drawn from the profile).
    #[arg(long)]
    pub(super) no_hints: bool,
    #[command(flatten)]
    pub(super) gate: GateArgs,
    /// Write the budget verdicts as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub(super) junit: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct MergeArgs {
    /// JSON profiles written by `mlprof run -o FILE` (one per host or rank).
    #[arg(required = true, num_args = 1.., value_name = "PROFILE")]
    pub(super) profiles: Vec<PathBuf>,
    #[command(flatten)]
    pub(super) format: FormatArgs,
    /// Write the merged profile (or report) to FILE: format from --text/--json/--html, else
    /// from the extension (.html, .txt, otherwise JSON). Without it, a terminal report.
    #[arg(short, long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct DiffArgs {
    /// The profile compared against (`mlprof run -o BASE.json`).
    pub(super) base: PathBuf,
    /// The profile compared.
    pub(super) new: PathBuf,
    #[command(flatten)]
    pub(super) format: FormatArgs,
    /// Write the comparison to FILE: format from --text/--json/--html, else from the extension
    /// (.html, .txt, otherwise JSON). Without it, a terminal table.
    #[arg(short, long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct CheckArgs {
    /// A JSON profile written by `mlprof run -o FILE` or `--json`.
    pub(super) profile: PathBuf,
    #[command(flatten)]
    pub(super) gate: GateArgs,
}

/// Budgets and baseline, shared by `run` and `check`: exceeding them exits 97.
#[derive(Args)]
pub(super) struct GateArgs {
    /// Budgets from a file: FILE, or mlprof.toml / pyproject.toml [tool.mlprof] found from a
    /// directory (the working directory without a value) upward; flags override its limits.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = ".")]
    pub(super) budget: Option<PathBuf>,
    /// Fail when the peak heap or a line's allocations grew against this saved profile by more
    /// than --tolerance percent and 10 MiB.
    #[arg(long, value_name = "PROFILE")]
    pub(super) baseline: Option<PathBuf>,
    /// Growth against the baseline allowed, in percent.
    #[arg(long, value_name = "PERCENT", default_value_t = crate::gate::baseline::DEFAULT_PERCENT)]
    pub(super) tolerance: f64,
    /// Fail if the process tree's peak heap exceeds SIZE (exact, repeatable).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse_limit)]
    pub(super) max_peak: Option<u64>,
    /// Fail if the tree's peak RSS exceeds SIZE (noisier than the heap).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse_limit)]
    pub(super) max_rss: Option<u64>,
    /// Fail if lines flagged as likely leaks hold more than SIZE at the end.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse_limit)]
    pub(super) max_leak: Option<u64>,
    /// Fail if the tree's peak GPU memory (NVML) exceeds SIZE, or if the GPU cannot be read.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse_limit)]
    pub(super) max_gpu_memory: Option<u64>,
    /// Fail if one process's device memory reserved through its CUDA calls peaks above SIZE on
    /// any device, or if no CUDA call was seen.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse_limit)]
    pub(super) max_gpu_reserved: Option<u64>,
    /// Fail if one process's PyTorch tensors on any device peak above SIZE (its CUDA
    /// allocator's trace), or if no allocator was traced.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse_limit)]
    pub(super) max_gpu_allocated: Option<u64>,
}

impl GateArgs {
    pub(super) fn load(&self) -> Result<Gate> {
        Ok(Gate {
            budgets: budgets(
                self.budget.as_deref(),
                &crate::gate::Budgets {
                    max_peak_bytes: self.max_peak,
                    max_rss_bytes: self.max_rss,
                    max_leak_bytes: self.max_leak,
                    max_gpu_memory_bytes: self.max_gpu_memory,
                    max_gpu_reserved_bytes: self.max_gpu_reserved,
                    max_gpu_allocated_bytes: self.max_gpu_allocated,
                    ..Default::default()
                },
            )?,
            baseline: self.baseline.as_deref().map(read_profile).transpose()?,
            tolerance: crate::gate::baseline::Tolerance {
                percent: self.tolerance,
                ..Default::default()
            },
        })
    }
}

/// Formats of `mlprof export`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ExportFormat {
    /// Folded stacks (`a;b;c value`) for flamegraph.pl, inferno and others.
    Folded,
    /// speedscope's JSON file format (all measures).
    Speedscope,
    /// pprof's gzipped profile.proto (go tool pprof, Pyroscope, Parca, Grafana).
    Pprof,
    /// Chrome's Trace Event format: counter tracks (chrome://tracing, Perfetto).
    ChromeTrace,
}

#[derive(Args)]
pub(super) struct ExportArgs {
    /// A JSON profile written by `mlprof run -o FILE` or `--json`.
    pub(super) profile: PathBuf,
    /// The format to write.
    #[arg(long, value_enum)]
    pub(super) format: ExportFormat,
    /// What the export shows [default: cpu]: folded stacks' weights, the profile speedscope
    /// opens on and pprof's default sample type (cpu, wall, alloc_space, inuse_space); the
    /// other measures stay in speedscope and pprof files. Not for chrome-trace.
    #[arg(long, value_enum)]
    pub(super) measure: Option<render::Measure>,
    /// Write to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct FormatArgs {
    /// Terminal report.
    #[arg(long, conflicts_with_all = ["json", "html"])]
    pub(super) text: bool,
    /// JSON profile (schema: docs/profile-schema.md).
    #[arg(long, conflicts_with = "html")]
    pub(super) json: bool,
    /// Self-contained HTML page.
    #[arg(long)]
    pub(super) html: bool,
    /// Lay text out in COLUMNS cells (40 or more; 0: no limit). Default: $COLUMNS, else the
    /// terminal's width, else 100 (a pipe or a file).
    #[arg(long, value_name = "COLUMNS", value_parser = super::terminal::width_arg)]
    pub(super) width: Option<usize>,
}

impl FormatArgs {
    pub(super) fn chosen(&self) -> Option<Format> {
        if self.text {
            Some(Format::Text)
        } else if self.json {
            Some(Format::Json)
        } else if self.html {
            Some(Format::Html)
        } else {
            None
        }
    }
}

#[derive(Args)]
pub(super) struct RunArgs {
    #[command(flatten)]
    pub(super) format: FormatArgs,
    /// Write the report to FILE (format from --text/--json/--html, else from the extension:
    /// .html, .txt, otherwise JSON). Nothing else is printed but one line when the profile has
    /// warnings.
    #[arg(short, long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
    /// Print no report and no warnings (use with -o to only save the profile); a failed budget
    /// still prints its verdict.
    #[arg(short, long)]
    pub(super) quiet: bool,
    /// CPU samples per second of CPU time, per thread (0: no CPU sampling; at most 10000).
    #[arg(long, value_name = "HZ", default_value_t = DEFAULT_RATE_HZ)]
    pub(super) rate: u32,
    /// Mean bytes allocated between two allocation samples (0: no per-line memory).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_MEMORY_SAMPLE, value_parser = crate::units::size::parse)]
    pub(super) memory_sample_bytes: u64,
    /// Mean bytes copied between two copy samples (0: no copy volume).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_COPY_SAMPLE, value_parser = crate::units::size::parse)]
    pub(super) copy_sample_bytes: u64,
    #[command(flatten)]
    pub(super) gate: GateArgs,
    /// Write the budget verdicts as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub(super) junit: Option<PathBuf>,
    /// Leave out the hints (suggestions drawn from the profile).
    #[arg(long)]
    pub(super) no_hints: bool,
    /// Profile only the launched process: not its fork children, nor programs it runs.
    #[arg(long)]
    pub(super) no_follow: bool,
    /// Do not poll the GPU.
    #[arg(long)]
    pub(super) no_gpu: bool,
    /// Do not record GPU kernel time (CUPTI is then never loaded into the program).
    #[arg(long)]
    pub(super) no_gpu_time: bool,
    /// Do not trace PyTorch's CUDA allocator (no start-up hook on PYTHONPATH, no tensors at
    /// the GPU peak: the report keeps the CUDA calls' segment view).
    #[arg(long)]
    pub(super) no_gpu_tensors: bool,
    /// GPU polls per second (NVML), 1 to 100.
    #[arg(long, value_name = "HZ", default_value_t = 10.0, value_parser = gpu_rate)]
    pub(super) gpu_rate: f64,
    /// Load this NVML library instead of libnvidia-ml.so.1 (also MLPROF_NVML_LIB).
    #[arg(long, value_name = "PATH")]
    pub(super) gpu_lib: Option<PathBuf>,
    /// After the command ends, keep collecting from descendants it left running for up to
    /// SECONDS; any still running then are reported as such and left running.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = seconds)]
    pub(super) wait_children: f64,
    /// While the command runs, write the profile so far to the -o file every SECONDS (in the
    /// report's format, replaced atomically: never seen half-written); the report at the end
    /// replaces the last one. Needs -o FILE.
    #[arg(long, value_name = "SECONDS", value_parser = interval)]
    pub(super) snapshot_every: Option<f64>,
    /// SIGUSR1 sent to mlprof (`kill -USR1 MLPROF_PID`) writes a snapshot to the -o file now,
    /// and is not passed on to the command. Without this flag mlprof passes SIGUSR1 on, as
    /// other signals. Needs -o FILE.
    #[arg(long)]
    pub(super) snapshot_on_signal: bool,
    /// Write one HTML page per region the program marked (`mlprof.mark`; each test under the
    /// pytest plugin) into DIR.
    #[arg(long, value_name = "DIR")]
    pub(super) regions_html: Option<PathBuf>,
    /// Attribute time to any file, the standard library and installed packages included.
    #[arg(long, conflicts_with = "profile_only")]
    pub(super) profile_all: bool,
    /// Attribute time only to files whose path contains one of these (comma-separated).
    #[arg(long, value_name = "PATTERNS", value_delimiter = ',')]
    pub(super) profile_only: Vec<String>,
    /// Count every thread's waiting on its lines. By default waiting counts for each
    /// process's main thread, and for other threads only while the main thread waits too;
    /// helpers idle while it computes, and waiting with no frame of your code (pool workers
    /// waiting for work), are listed per thread only.
    #[arg(long)]
    pub(super) idle: bool,
    /// The command to profile, after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub(super) command: Vec<OsString>,
}

#[derive(Args)]
pub(super) struct ReportArgs {
    /// A JSON profile written by `mlprof run -o FILE` or `--json`.
    pub(super) profile: PathBuf,
    #[command(flatten)]
    pub(super) format: FormatArgs,
    /// Write the report to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
    /// Leave out the hints (suggestions drawn from the profile).
    #[arg(long)]
    pub(super) no_hints: bool,
}

/// Run the command line; returns the exit code (the profiled command's, for `run`).
/// A GPU polling rate: 1 to 100 per second.
pub(super) fn gpu_rate(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(hz) if (1.0..=100.0).contains(&hz) => Ok(hz),
        _ => Err(format!("'{text}' is not a rate from 1 to 100 per second")),
    }
}

/// A snapshot interval in seconds: from 0.1 to a day.
pub(super) fn interval(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.1..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "'{text}' is not a number of seconds from 0.1 to 86400"
        )),
    }
}

/// A duration in seconds: finite, not negative, at most a day.
pub(super) fn seconds(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.0..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "'{text}' is not a number of seconds from 0 to 86400"
        )),
    }
}
