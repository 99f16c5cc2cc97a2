//! The command line: `mlprof run`, `report`, `export`, `check`, `merge`, `diff`, `sweep`,
//! `attach` and `jupyter`, parsed with clap and carried out by wiring the stages: launch →
//! collect → symbolize → model → annotate → gate → render.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::error::{Error, Result};
use crate::gate::Gate;
use crate::render::{self, Format};
use crate::sanitize::Clean;
use crate::{collect, launch, model, pipeline, symbolize};

mod jupyter;
mod regions;
mod sweep;

/// Default CPU sampling rate (see docs/benchmarks.md for how it was chosen).
pub const DEFAULT_RATE_HZ: u32 = 100;
/// Default mean bytes between allocation samples (see docs/benchmarks.md).
pub const DEFAULT_MEMORY_SAMPLE: &str = "128KiB";
/// Default mean bytes between copy samples.
pub const DEFAULT_COPY_SAMPLE: &str = "1MiB";

#[derive(Parser)]
#[command(
    name = "mlprof",
    version,
    about = "Profile CPU, memory and GPU of Python ML programs, per line"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
struct JupyterArgs {
    #[command(subcommand)]
    action: JupyterAction,
}

#[derive(Subcommand)]
enum JupyterAction {
    /// Register the kernel "Python 3 (mlprof)": ipykernel started under `mlprof run`, so that
    /// `%load_ext mlprof` and `%%mlprof` measure every allocation of a cell.
    Install(JupyterInstallArgs),
}

#[derive(Args)]
struct JupyterInstallArgs {
    /// Install for this user (Jupyter's user data directory) instead of into the Python
    /// environment.
    #[arg(long)]
    user: bool,
    /// The kernel's name (its directory).
    #[arg(long, default_value = "mlprof")]
    name: String,
    /// The name Jupyter shows.
    #[arg(long, default_value = "Python 3 (mlprof)")]
    display_name: String,
    /// The Python that runs the kernel (default: the one beside this mlprof, else python3 on
    /// PATH); it needs ipykernel.
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
}

#[derive(Args)]
struct AttachArgs {
    /// Process id of a running CPython 3.9-3.13.
    pid: u32,
    /// Stop after SECONDS (default: at Ctrl-C, or when the process ends).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    duration: Option<f64>,
    /// Samples per second (at most 10000, as `run`).
    #[arg(long, value_name = "HZ", default_value_t = DEFAULT_RATE_HZ)]
    rate: u32,
    #[command(flatten)]
    format: FormatArgs,
    /// Write the report to FILE (format from --text/--json/--html, else from the extension).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Attribute time to any file, the standard library and installed packages included.
    #[arg(long)]
    profile_all: bool,
    /// Count every thread's waiting on its lines.
    #[arg(long)]
    idle: bool,
    /// Leave out the hints (suggestions drawn from the profile).
    #[arg(long)]
    no_hints: bool,
    #[command(flatten)]
    gate: GateArgs,
    /// Write the budget verdicts as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

#[derive(Args)]
struct MergeArgs {
    /// JSON profiles written by `mlprof run -o FILE` (one per host or rank).
    #[arg(required = true, num_args = 1.., value_name = "PROFILE")]
    profiles: Vec<PathBuf>,
    #[command(flatten)]
    format: FormatArgs,
    /// Write the merged profile (or report) to FILE: format from --text/--json/--html, else
    /// from the extension (.html, .txt, otherwise JSON). Without it, a terminal report.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct DiffArgs {
    /// The profile compared against (`mlprof run -o BASE.json`).
    base: PathBuf,
    /// The profile compared.
    new: PathBuf,
    #[command(flatten)]
    format: FormatArgs,
    /// Write the comparison to FILE: format from --text/--json/--html, else from the extension
    /// (.html, .txt, otherwise JSON). Without it, a terminal table.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct CheckArgs {
    /// A JSON profile written by `mlprof run -o FILE` or `--json`.
    profile: PathBuf,
    #[command(flatten)]
    gate: GateArgs,
}

/// Budgets and baseline, shared by `run` and `check`: exceeding them exits 97.
#[derive(Args)]
struct GateArgs {
    /// Budgets from a file: FILE, or mlprof.toml / pyproject.toml [tool.mlprof] found from a
    /// directory (the working directory without a value) upward; flags override its limits.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = ".")]
    budget: Option<PathBuf>,
    /// Fail when the peak heap or a line's allocations grew against this saved profile by more
    /// than --tolerance percent and 10 MiB.
    #[arg(long, value_name = "PROFILE")]
    baseline: Option<PathBuf>,
    /// Growth against the baseline allowed, in percent.
    #[arg(long, value_name = "PERCENT", default_value_t = crate::gate::baseline::DEFAULT_PERCENT)]
    tolerance: f64,
    /// Fail if the process tree's peak heap exceeds SIZE (exact, repeatable).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse)]
    max_peak: Option<u64>,
    /// Fail if the tree's peak RSS exceeds SIZE (noisier than the heap).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse)]
    max_rss: Option<u64>,
    /// Fail if lines flagged as likely leaks hold more than SIZE at the end.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse)]
    max_leak: Option<u64>,
    /// Fail if the tree's peak GPU memory (NVML) exceeds SIZE, or if the GPU cannot be read.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse)]
    max_gpu_memory: Option<u64>,
}

impl GateArgs {
    fn load(&self) -> Result<Gate> {
        Ok(Gate {
            budgets: budgets(
                self.budget.as_deref(),
                &crate::gate::Budgets {
                    max_peak_bytes: self.max_peak,
                    max_rss_bytes: self.max_rss,
                    max_leak_bytes: self.max_leak,
                    max_gpu_memory_bytes: self.max_gpu_memory,
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
enum ExportFormat {
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
struct ExportArgs {
    /// A JSON profile written by `mlprof run -o FILE` or `--json`.
    profile: PathBuf,
    /// The format to write.
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// What folded stacks are weighed by (speedscope holds all of them).
    #[arg(long, value_enum, default_value = "cpu")]
    measure: render::Measure,
    /// Write to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct FormatArgs {
    /// Terminal report.
    #[arg(long, conflicts_with_all = ["json", "html"])]
    text: bool,
    /// JSON profile (schema: docs/profile-schema.md).
    #[arg(long, conflicts_with = "html")]
    json: bool,
    /// Self-contained HTML page.
    #[arg(long)]
    html: bool,
}

impl FormatArgs {
    fn chosen(&self) -> Option<Format> {
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
struct RunArgs {
    #[command(flatten)]
    format: FormatArgs,
    /// Write the report to FILE (format from --text/--json/--html, else from the extension:
    /// .html, .txt, otherwise JSON). Nothing else is printed.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Print no report (use with -o to only save the profile).
    #[arg(short, long)]
    quiet: bool,
    /// CPU samples per second of CPU time, per thread (0: no CPU sampling; at most 10000).
    #[arg(long, value_name = "HZ", default_value_t = DEFAULT_RATE_HZ)]
    rate: u32,
    /// Mean bytes allocated between two allocation samples (0: no per-line memory).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_MEMORY_SAMPLE, value_parser = crate::units::size::parse)]
    memory_sample_bytes: u64,
    /// Mean bytes copied between two copy samples (0: no copy volume).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_COPY_SAMPLE, value_parser = crate::units::size::parse)]
    copy_sample_bytes: u64,
    #[command(flatten)]
    gate: GateArgs,
    /// Write the budget verdicts as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Leave out the hints (suggestions drawn from the profile).
    #[arg(long)]
    no_hints: bool,
    /// Profile only the launched process: not its fork children, nor programs it runs.
    #[arg(long)]
    no_follow: bool,
    /// Do not poll the GPU.
    #[arg(long)]
    no_gpu: bool,
    /// GPU polls per second (NVML), 1 to 100.
    #[arg(long, value_name = "HZ", default_value_t = 10.0, value_parser = gpu_rate)]
    gpu_rate: f64,
    /// Load this NVML library instead of libnvidia-ml.so.1 (also MLPROF_NVML_LIB).
    #[arg(long, value_name = "PATH")]
    gpu_lib: Option<PathBuf>,
    /// After the command ends, keep collecting from descendants it left running for up to
    /// SECONDS; any still running then are reported as such and left running.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = seconds)]
    wait_children: f64,
    /// While the command runs, write the profile so far to the -o file every SECONDS (in the
    /// report's format, replaced atomically: never seen half-written); the report at the end
    /// replaces the last one. Needs -o FILE.
    #[arg(long, value_name = "SECONDS", value_parser = interval)]
    snapshot_every: Option<f64>,
    /// SIGUSR1 sent to mlprof (`kill -USR1 MLPROF_PID`) writes a snapshot to the -o file now,
    /// and is not passed on to the command. Without this flag mlprof passes SIGUSR1 on, as
    /// other signals. Needs -o FILE.
    #[arg(long)]
    snapshot_on_signal: bool,
    /// Write one HTML page per region the program marked (`mlprof.mark`; each test under the
    /// pytest plugin) into DIR.
    #[arg(long, value_name = "DIR")]
    regions_html: Option<PathBuf>,
    /// Attribute time to any file, the standard library and installed packages included.
    #[arg(long, conflicts_with = "profile_only")]
    profile_all: bool,
    /// Attribute time only to files whose path contains one of these (comma-separated).
    #[arg(long, value_name = "PATTERNS", value_delimiter = ',')]
    profile_only: Vec<String>,
    /// Count every thread's waiting on its lines. By default waiting counts for each
    /// process's main thread, and for other threads only while the main thread waits too;
    /// helpers idle while it computes, and waiting with no frame of your code (pool workers
    /// waiting for work), are listed per thread only.
    #[arg(long)]
    idle: bool,
    /// The command to profile, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

#[derive(Args)]
struct ReportArgs {
    /// A JSON profile written by `mlprof run -o FILE` or `--json`.
    profile: PathBuf,
    #[command(flatten)]
    format: FormatArgs,
    /// Write the report to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Leave out the hints (suggestions drawn from the profile).
    #[arg(long)]
    no_hints: bool,
}

/// Run the command line; returns the exit code (the profiled command's, for `run`).
pub fn run(args: impl IntoIterator<Item = OsString>) -> Result<i32> {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return Ok(if err.use_stderr() {
                crate::error::EXIT_USAGE
            } else {
                0
            });
        }
    };
    match cli.command {
        Command::Run(args) => run_command(args),
        Command::Report(args) => report(args),
        Command::Export(args) => export(args),
        Command::Check(args) => check(args),
        Command::Merge(args) => merge(args),
        Command::Diff(args) => diff(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Attach(args) => attach(args),
        Command::Jupyter(JupyterArgs {
            action: JupyterAction::Install(args),
        }) => {
            let dir = jupyter::install(&jupyter::Install {
                user: args.user,
                name: args.name,
                display_name: args.display_name.clone(),
                python: args.python,
            })?;
            println!(
                "installed the kernel \"{}\" in {}",
                Clean(&args.display_name),
                Clean(&dir.display().to_string())
            );
            Ok(0)
        }
    }
}

/// Set by SIGINT or SIGTERM during `mlprof attach`: stop sampling and report.
static ATTACH_STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn stop_attach(_: libc::c_int) {
    ATTACH_STOP.store(true, Ordering::Release);
}

fn attach(args: AttachArgs) -> Result<i32> {
    if args.rate == 0 {
        return Err(Error::with_code(
            "--rate must be at least 1 sample per second",
            crate::error::EXIT_USAGE,
        ));
    }
    let rate = args.rate.min(mlprof_wire::MAX_RATE_HZ);
    if rate < args.rate {
        eprintln!(
            "mlprof: --rate {} is above the most mlprof samples at; using {rate}, as `run` does",
            args.rate
        );
    }
    let gate = args.gate.load()?;
    let (format, destination) = destination(&args.output, args.format.chosen(), false)?;
    if let Destination::File(path) = &destination {
        file_write(path)?;
    }
    if let Some(path) = &args.junit {
        file_write(path)?;
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, stop_attach as *const () as libc::sighandler_t) };
    }
    let start_ns = collect::monotonic_ns();
    let gpu = collect::gpu::GpuPoller::start(
        &collect::gpu::GpuOptions {
            enabled: true,
            lib: None,
            rate_hz: 10.0,
        },
        start_ns,
    );
    let options = collect::attach::Options {
        pid: args.pid,
        duration: args.duration.map(std::time::Duration::from_secs_f64),
        rate_hz: rate,
        stop: &ATTACH_STOP,
        start_ns,
    };
    let mut recording = collect::attach::record(&options)?;
    recording.gpu = gpu.finish();
    let filter = model::Filter {
        all: args.profile_all,
        only: Vec::new(),
        idle: args.idle,
    };
    let profile = pipeline::profile(
        &recording,
        &pipeline::Options {
            filter: &filter,
            hints: !args.no_hints,
            gate: Some(&gate),
        },
    );
    if !matches!(destination, Destination::Stderr) || format != Format::Text {
        for warning in &profile.warnings {
            say(format_args!("warning: {}", Clean(warning)));
        }
    }
    let report_on_stdout = matches!(destination, Destination::Stdout);
    emit(&profile, format, destination)?;
    for v in &profile.violations {
        say(format_args!("{}", Clean(&v.message)));
    }
    ci_outputs(
        &profile,
        args.junit.as_deref(),
        report_on_stdout,
        gate.any(),
    )?;
    Ok(if profile.violations.is_empty() {
        0
    } else {
        crate::gate::EXIT_BUDGET
    })
}

/// Where a report goes.
enum Destination {
    File(PathBuf),
    Stdout,
    Stderr,
    Nowhere,
}

fn run_command(args: RunArgs) -> Result<i32> {
    launch::block_forwarded_signals();
    let snapshot_flag = if args.snapshot_every.is_some() {
        Some("--snapshot-every")
    } else if args.snapshot_on_signal {
        Some("--snapshot-on-signal")
    } else {
        None
    };
    if let (Some(flag), None) = (snapshot_flag, &args.output) {
        return Err(Error::with_code(
            format!("{flag} needs -o FILE: snapshots are written to the report file"),
            crate::error::EXIT_USAGE,
        ));
    }
    let gate = Arc::new(args.gate.load()?);
    let (format, destination) = run_destination(&args)?;
    // Nothing has run yet: a report that cannot be written is an error now, not once the
    // program has run.
    if let Destination::File(path) = &destination {
        let how = file_write(path)?;
        if let (Some(flag), FileWrite::Direct) = (snapshot_flag, how) {
            return Err(Error::with_code(
                format!(
                    "{flag}: {} cannot be replaced atomically (a device, FIFO or link, or a \
                     directory mlprof may not add files to), so a snapshot could be read \
                     half-written; name a regular file",
                    path.display()
                ),
                crate::error::EXIT_USAGE,
            ));
        }
    }
    if let Some(path) = &args.junit {
        file_write(path)?;
    }
    let session = launch::Session::create()?;
    let to_stderr = matches!(destination, Destination::Stdout) && format != Format::Text;
    let launch_ns = collect::monotonic_ns();
    let sampling = launch::Sampling {
        rate_hz: args.rate,
        memory_sample_bytes: args.memory_sample_bytes,
        copy_sample_bytes: args.copy_sample_bytes,
        follow: !args.no_follow,
    };
    let gpu = collect::gpu::GpuPoller::start(
        &collect::gpu::GpuOptions {
            enabled: !args.no_gpu,
            lib: args.gpu_lib.clone(),
            rate_hz: args.gpu_rate,
        },
        launch_ns,
    );
    let command: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let filter = model::Filter {
        all: args.profile_all,
        only: args.profile_only.clone(),
        idle: args.idle,
    };
    let snapshotter = match (&destination, snapshot_flag) {
        (Destination::File(path), Some(_)) => Some(Snapshotter::start(SnapshotJob {
            path: path.clone(),
            format,
            command: command.clone(),
            filter: filter.clone(),
            gate: gate.clone(),
            gpu: gpu.view(),
            hints: !args.no_hints,
        })),
        _ => None,
    };
    let mut launched = launch::spawn(&session, &args.command, to_stderr, &sampling)?;
    let forwarding = Arc::new(launch::Forwarding::default());
    forwarding.remove_if_abandoned(session.dir().to_path_buf());
    forwarding
        .snapshot_on_signal
        .store(args.snapshot_on_signal, Ordering::Release);
    launched.exited = launch::watch_exit(launched.exited, forwarding.clone());
    launch::forward_signals(
        launched.pid,
        session.dir().to_path_buf(),
        forwarding.clone(),
    );
    let wait = std::time::Duration::from_secs_f64(args.wait_children);
    let reporter =
        regions::Reporter::start(session.dir().to_path_buf(), filter.clone(), !args.no_hints);
    let snapshots = collect::Snapshots {
        regions: Some(&reporter),
        every: args.snapshot_every.map(std::time::Duration::from_secs_f64),
        sink: snapshotter
            .as_ref()
            .map(|s| s as &dyn collect::SnapshotSink),
    };
    let recorded = collect::record(&session, launched, launch_ns, wait, &forwarding, &snapshots);
    // The waiting is over: a signal now abandons the report (exiting with the program's
    // status) rather than waiting for whatever symbolizing or rendering is stuck on.
    forwarding.reporting.store(true, Ordering::Release);
    let mut recording = recorded?;
    recording.gpu = gpu.finish();
    recording.command = command;
    let natives = symbolize::native_names(&recording);
    let profile = pipeline::profile_named(
        &recording,
        &natives,
        &pipeline::Options {
            filter: &filter,
            hints: !args.no_hints,
            gate: Some(&gate),
        },
    );
    let status = match (profile.exit.code, profile.exit.signal) {
        (Some(0), _) if !profile.violations.is_empty() => crate::gate::EXIT_BUDGET,
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => crate::error::EXIT_ERROR,
    };
    // The program has run: from here on its exit status is ours, whatever fails (each
    // failure is one line).
    if !matches!(destination, Destination::Stderr) || format != Format::Text {
        for warning in &profile.warnings {
            say(format_args!("warning: {}", Clean(warning)));
        }
    }
    let report_on_stdout = matches!(destination, Destination::Stdout);
    if let Some(snapshotter) = &snapshotter {
        // From here on the file is the final report's: a snapshot being written is waited
        // for, and none is written after it.
        snapshotter.claim();
    }
    if let Err(e) = emit(&profile, format, destination) {
        say(format_args!("report not written: {e}"));
    }
    if let Some(dir) = &args.regions_html {
        let options = pipeline::Options {
            filter: &filter,
            hints: !args.no_hints,
            gate: None,
        };
        if let Err(e) = regions::write_pages(&recording, &natives, &options, dir) {
            say(format_args!("region pages not written: {e}"));
        }
    }
    for v in &profile.violations {
        say(format_args!("{}", Clean(&v.message)));
    }
    if let Err(e) = ci_outputs(
        &profile,
        args.junit.as_deref(),
        report_on_stdout,
        gate.any(),
    ) {
        say(format_args!("{e}"));
    }
    forwarding.stop.store(true, Ordering::Relaxed);
    Ok(status)
}

/// The nice value of the thread that makes snapshots.
const SNAPSHOT_NICE: libc::c_int = 10;

/// What a snapshot is made of besides the recording, and where it goes.
struct SnapshotJob {
    path: PathBuf,
    format: Format,
    command: Vec<String>,
    filter: model::Filter,
    gate: Arc<Gate>,
    gpu: collect::gpu::GpuView,
    hints: bool,
}

/// Snapshots of the profile while the command runs (`--snapshot-every`,
/// `--snapshot-on-signal`): the collector hands over its recording so far
/// ([`collect::SnapshotSink`], shared rather than copied); a thread of its own copies it and
/// runs the final report's pipeline on it (native names, attribution, sources, budgets,
/// rendering) and replaces the report file atomically, until the final report claims the file.
/// One snapshot at a time: the collector hands over the next only once this one is done.
struct Snapshotter {
    to: std::sync::mpsc::Sender<collect::Snapshot>,
    /// A snapshot is being made or written.
    busy: Arc<std::sync::atomic::AtomicBool>,
    /// Held while a snapshot is written; `true` once the final report has claimed the file.
    claimed: Arc<std::sync::Mutex<bool>>,
}

impl Snapshotter {
    fn start(job: SnapshotJob) -> Snapshotter {
        let (to, from) = std::sync::mpsc::channel::<collect::Snapshot>();
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let claimed = Arc::new(std::sync::Mutex::new(false));
        let (working, file) = (busy.clone(), claimed.clone());
        std::thread::spawn(move || {
            // Each distinct failure is said once (a full disk would say it every interval).
            let mut said = String::new();
            // Below the program and the collector: on a busy machine a snapshot comes later
            // rather than slowing either (Linux nice values are per thread).
            // SAFETY: setpriority on this thread's own id; no memory is involved.
            unsafe {
                libc::setpriority(
                    libc::PRIO_PROCESS,
                    libc::syscall(libc::SYS_gettid) as libc::id_t,
                    SNAPSHOT_NICE,
                )
            };
            for snapshot in from {
                // The copy of what the collector shares, made here, not on its thread.
                let recording = snapshot.into_recording();
                if let Err(e) = job.write(recording, &file) {
                    let line = e.to_string();
                    if line != said {
                        say(format_args!("snapshot not written: {line}"));
                        said = line;
                    }
                }
                working.store(false, Ordering::Release);
            }
        });
        Snapshotter { to, busy, claimed }
    }

    /// The file is the final report's now: waits for a snapshot being written (not for one
    /// being made), and no snapshot is written after this.
    fn claim(&self) {
        *self.claimed.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }
}

impl collect::SnapshotSink for Snapshotter {
    fn idle(&self) -> bool {
        !self.busy.load(Ordering::Acquire)
    }

    fn take(&self, snapshot: collect::Snapshot) {
        self.busy.store(true, Ordering::Release);
        if self.to.send(snapshot).is_err() {
            self.busy.store(false, Ordering::Release);
        }
    }
}

impl SnapshotJob {
    /// The profile of `recording` made as the final report is, written over the report file
    /// unless the final report has `claimed` it.
    fn write(
        &self,
        mut recording: crate::recording::Recording,
        claimed: &std::sync::Mutex<bool>,
    ) -> Result<()> {
        recording.command = self.command.clone();
        recording.gpu = self.gpu.current();
        let profile = pipeline::profile(
            &recording,
            &pipeline::Options {
                filter: &self.filter,
                hints: self.hints,
                gate: Some(&self.gate),
            },
        );
        let text = render::render_for(&profile, self.format, render::text::Style::default())?;
        let claimed = claimed.lock().unwrap_or_else(|p| p.into_inner());
        if *claimed {
            return Ok(());
        }
        write_file(&self.path, text.as_bytes())
    }
}

/// One line `mlprof: ...` on stderr, once the program has run: a stderr that cannot be written
/// (`2>/dev/full`) loses the line rather than aborting mlprof (as `eprintln!` would), which
/// would replace the program's exit status. The line is [`crate::sanitize::clean`]ed: what it
/// quotes (paths, names, messages) may come from the profiled program, and stays one line.
fn say(line: std::fmt::Arguments) {
    let line = line.to_string();
    let _ = writeln!(std::io::stderr().lock(), "mlprof: {}", Clean(&line));
}

/// A GPU polling rate: 1 to 100 per second.
fn gpu_rate(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(hz) if (1.0..=100.0).contains(&hz) => Ok(hz),
        _ => Err(format!("'{text}' is not a rate from 1 to 100 per second")),
    }
}

/// A snapshot interval in seconds: from 0.1 to a day.
fn interval(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.1..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "'{text}' is not a number of seconds from 0.1 to 86400"
        )),
    }
}

/// A duration in seconds: finite, not negative, at most a day.
fn seconds(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.0..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "'{text}' is not a number of seconds from 0 to 86400"
        )),
    }
}

fn run_destination(args: &RunArgs) -> Result<(Format, Destination)> {
    destination(&args.output, args.format.chosen(), args.quiet)
}

/// Where a report of `run` or `attach` goes: the `-o` file (format from the flag, else its
/// extension), nowhere with `-q`, stdout for a chosen format, else the terminal report on
/// stderr.
fn destination(
    output: &Option<PathBuf>,
    chosen: Option<Format>,
    quiet: bool,
) -> Result<(Format, Destination)> {
    Ok(match (output, chosen) {
        (Some(path), format) => {
            let path = placeholders(path)?;
            (
                format.unwrap_or_else(|| format_for(&path)),
                Destination::File(path),
            )
        }
        (None, _) if quiet => (Format::Text, Destination::Nowhere),
        (None, Some(format)) => (format, Destination::Stdout),
        (None, None) => (Format::Text, Destination::Stderr),
    })
}

/// `-o` with `{host}`, `{rank}` and `{pid}` replaced, so that each node or rank of a job
/// writes its own file: the host name, the rank from the environment (`norank` without one),
/// mlprof's process id.
fn placeholders(path: &Path) -> Result<PathBuf> {
    let Some(text) = path.to_str().filter(|t| t.contains('{')) else {
        return Ok(path.to_path_buf());
    };
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| placeholder_error(text))?;
        let value = match &after[..close] {
            "host" => host_name(),
            "rank" => crate::launch::env_rank().map_or_else(|| "norank".to_string(), |r| r.0),
            "pid" => std::process::id().to_string(),
            _ => return Err(placeholder_error(text)),
        };
        out.push_str(&placeholder_value(&value));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(PathBuf::from(out))
}

/// A placeholder's value as it goes into a path. It comes from the environment (a rank
/// variable) or the host name, so it names part of one file name and nothing else: `/` and
/// control characters (and bidirectional controls) become `_`, and so do dots at its start
/// and end, so that it forms no `.` or `..` component whatever the template puts beside it
/// (`RANK=..` with `-o runs/{rank}/p.json` must not write into the directory above `runs`).
fn placeholder_value(value: &str) -> String {
    let mut out: Vec<char> = value
        .chars()
        .map(|c| {
            if c == '/' || crate::sanitize::unsafe_char(c) {
                '_'
            } else {
                c
            }
        })
        .collect();
    let mut i = 0;
    while out.get(i) == Some(&'.') {
        out[i] = '_';
        i += 1;
    }
    let mut j = out.len();
    while j > 0 && out[j - 1] == '.' {
        out[j - 1] = '_';
        j -= 1;
    }
    if out.is_empty() {
        return "_".to_string();
    }
    out.into_iter().collect()
}

fn placeholder_error(text: &str) -> Error {
    Error::with_code(
        format!("-o {text}: placeholders are {{host}}, {{rank}} and {{pid}}"),
        crate::error::EXIT_USAGE,
    )
}

/// This machine's host name (`unknown-host` if it cannot be read), safe in a file name.
fn host_name() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into our buffer.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let host = String::from_utf8_lossy(&name[..len]).into_owned();
    if ok && !host.is_empty() {
        host
    } else {
        "unknown-host".to_string()
    }
}

fn format_for(path: &Path) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => Format::Html,
        Some("txt") => Format::Text,
        _ => Format::Json,
    }
}

fn report(args: ReportArgs) -> Result<i32> {
    let mut profile = read_profile(&args.profile)?;
    // Hints drawn again, by this version's rules.
    pipeline::redraw_hints(&mut profile, !args.no_hints);
    let format = args.format.chosen().unwrap_or(Format::Text);
    let destination = args.output.map_or(Destination::Stdout, Destination::File);
    emit(&profile, format, destination)?;
    Ok(0)
}

fn merge(args: MergeArgs) -> Result<i32> {
    let inputs = args
        .profiles
        .iter()
        .map(|path| {
            Ok(model::merge::Input {
                source: path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into(),
                ),
                profile: read_profile(path)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut merged = model::merge::merge(inputs);
    pipeline::redraw_hints(&mut merged, true);
    let (format, destination) = document_output(args.output, args.format.chosen());
    emit(&merged, format, destination)?;
    Ok(0)
}

/// Where a document made from saved files (`merge`, `diff`, `sweep`) goes: `-o FILE` (format
/// from the flag, else the extension), else stdout (format from the flag, else text).
fn document_output(output: Option<PathBuf>, chosen: Option<Format>) -> (Format, Destination) {
    match output {
        Some(path) => (
            chosen.unwrap_or_else(|| format_for(&path)),
            Destination::File(path),
        ),
        None => (chosen.unwrap_or(Format::Text), Destination::Stdout),
    }
}

fn diff(args: DiffArgs) -> Result<i32> {
    let base = read_profile(&args.base)?;
    let new = read_profile(&args.new)?;
    let d = model::diff::compare(
        &base,
        &args.base.display().to_string(),
        &new,
        &args.new.display().to_string(),
    );
    let (format, destination) = document_output(args.output, args.format.chosen());
    let text = match format {
        Format::Text => render::diff::text(&d),
        Format::Json => render::diff::json(&d)?,
        Format::Html => render::diff::html(&d, &base, &new)?,
    };
    write_text(&text, destination)?;
    Ok(0)
}

fn check(args: CheckArgs) -> Result<i32> {
    let profile = read_profile(&args.profile)?;
    let gate = args.gate.load()?;
    if !gate.any() {
        return Err(Error::with_code(
            "check: no budget given (--budget, --max-peak, --max-rss, --max-leak, --max-gpu-memory, --baseline)",
            crate::error::EXIT_USAGE,
        ));
    }
    let violations = gate.verdicts(&profile);
    for v in &violations {
        // The messages name files and lines of the program.
        say(format_args!("{}", v.message));
    }
    Ok(if violations.is_empty() {
        0
    } else {
        crate::gate::EXIT_BUDGET
    })
}

fn export(args: ExportArgs) -> Result<i32> {
    let profile = read_profile(&args.profile)?;
    let out = match args.format {
        ExportFormat::Folded => render::folded::render(&profile, args.measure).into_bytes(),
        ExportFormat::Speedscope => render::speedscope::render(&profile)?.into_bytes(),
        ExportFormat::Pprof => render::pprof::render(&profile)?,
        ExportFormat::ChromeTrace => render::chrome::render(&profile)?.into_bytes(),
    };
    write_bytes(
        &out,
        args.output.map_or(Destination::Stdout, Destination::File),
    )?;
    Ok(0)
}

fn emit(profile: &model::Profile, format: Format, destination: Destination) -> Result<()> {
    if matches!(destination, Destination::Nowhere) {
        return Ok(());
    }
    let style = match destination {
        Destination::Stdout => terminal_style(libc::STDOUT_FILENO),
        Destination::Stderr => terminal_style(libc::STDERR_FILENO),
        _ => render::text::Style::default(),
    };
    let text = render::render_for(profile, format, style)?;
    write_text(&text, destination)
}

/// Colour and width for a report written to `fd`: only on a terminal, and colour only without
/// `NO_COLOR` (https://no-color.org).
fn terminal_style(fd: libc::c_int) -> render::text::Style {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(fd) } != 1 {
        return render::text::Style::default();
    }
    // SAFETY: winsize is plain data, filled by the kernel.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ on a terminal descriptor with a valid winsize pointer.
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } == 0 && size.ws_col >= 40;
    let width = if ok { Some(size.ws_col as usize) } else { None };
    render::text::Style {
        color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        width,
    }
}

fn write_text(text: &str, destination: Destination) -> Result<()> {
    write_bytes(text.as_bytes(), destination)
}

fn write_bytes(text: &[u8], destination: Destination) -> Result<()> {
    match &destination {
        Destination::File(path) => write_file(path, text),
        Destination::Stdout => write_all(std::io::stdout().lock(), text),
        Destination::Stderr => write_all(std::io::stderr().lock(), text),
        Destination::Nowhere => Ok(()),
    }
}

fn write_all(mut out: impl Write, text: &[u8]) -> Result<()> {
    match out.write_all(text).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::new(format!("cannot write the report: {e}"))),
    }
}

/// How a report file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileWrite {
    /// Into a private temporary file beside it (0600 until complete), synced, then renamed
    /// over it: a reader never sees half a report, and a failed write leaves what was there.
    Atomic,
    /// Opened and written in place: a device (`/dev/stdout`, `/dev/full`), a FIFO, a path
    /// through a symbolic link, or a writable file in a directory we may not add files to.
    Direct,
}

/// Whether and how a report can be written at `path`: its directory exists and we may write
/// there (or the file itself is writable). Checked before the program runs, and again when
/// writing.
fn file_write(path: &Path) -> Result<FileWrite> {
    let cannot = |why: &str| Error::new(format!("cannot write {}: {why}", path.display()));
    if path.file_name().is_none() {
        return Err(cannot("not a file name"));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(cannot("Is a directory")),
        Ok(meta) => {
            let through = std::fs::metadata(path).map_err(|e| cannot(&io_reason(&e)))?;
            if through.is_dir() {
                Err(cannot("Is a directory"))
            } else if !may_access(path, libc::W_OK) {
                Err(cannot("Permission denied"))
            } else if meta.is_file() && may_access(dir, libc::W_OK | libc::X_OK) {
                Ok(FileWrite::Atomic)
            } else {
                Ok(FileWrite::Direct)
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => {
                Err(cannot(&format!("{} is not a directory", dir.display())))
            }
            Ok(_) if may_access(dir, libc::W_OK | libc::X_OK) => Ok(FileWrite::Atomic),
            Ok(_) => Err(cannot(&format!(
                "Permission denied (directory {})",
                dir.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(cannot(&format!(
                "directory {} does not exist",
                dir.display()
            ))),
            Err(e) => Err(cannot(&io_reason(&e))),
        },
        Err(e) => Err(cannot(&io_reason(&e))),
    }
}

/// `access(2)`: whether we may use `path` as `mode` says.
fn may_access(path: &Path, mode: libc::c_int) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path; access only inspects it.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

/// Write a report file: atomically where it can be ([`FileWrite`]).
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let written = match file_write(path)? {
        FileWrite::Atomic => write_atomic(path, bytes),
        FileWrite::Direct => write_direct(path, bytes),
    };
    written.map_err(|e| {
        Error::new(format!(
            "cannot write {}: {}",
            path.display(),
            io_reason(&e)
        ))
    })
}

fn write_direct(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.flush()?;
    if file.metadata()?.is_file() {
        file.sync_all()?;
    }
    Ok(())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default();
    let pid = std::process::id();
    let temp = if name.len() <= 200 {
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(".mlprof-{pid}.tmp"));
        dir.join(temp)
    } else {
        dir.join(format!(".mlprof-{pid}.tmp"))
    };
    // What the file had, or 0600 for a new one: a profile holds the program's command line,
    // paths and names, which are the user's alone.
    let mode = match std::fs::metadata(path) {
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(_) => 0o600,
    };
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
        return written;
    }
    // The rename lasts once the directory is synced (best effort: not every file system can).
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "No such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "Permission denied".to_string(),
        _ => e.to_string(),
    }
}

/// The budgets of a command: from the budget file if one is named (a directory, `.` when
/// `--budget` has no value: found from there upward), overridden by the flags.
fn budgets(file: Option<&Path>, flags: &crate::gate::Budgets) -> Result<crate::gate::Budgets> {
    let from_file = match file {
        None => crate::gate::Budgets::default(),
        Some(dir) if dir.is_dir() => {
            let start =
                std::path::absolute(dir).map_err(|e| Error::new(format!("--budget: {e}")))?;
            crate::gate::file::load(&crate::gate::file::discover(&start)?)?
        }
        Some(path) => crate::gate::file::load(path)?,
    };
    Ok(from_file.with_flags(flags))
}

/// CI outputs of the budget verdicts, when budgets were set: GitHub Actions annotations and job
/// summary (when `GITHUB_ACTIONS=true`; annotations on stdout unless the report is there), and
/// JUnit XML when asked.
fn ci_outputs(
    p: &model::Profile,
    junit: Option<&Path>,
    report_on_stdout: bool,
    budgets_set: bool,
) -> Result<()> {
    if let Some(path) = junit {
        write_file(path, crate::gate::report::junit(p).as_bytes())?;
    }
    if !budgets_set || std::env::var("GITHUB_ACTIONS").as_deref() != Ok("true") {
        return Ok(());
    }
    let annotations = crate::gate::report::github_annotations(&p.violations);
    // Written as `say` writes: a closed or full stream must not abort mlprof.
    let _ = if report_on_stdout {
        std::io::stderr().lock().write_all(annotations.as_bytes())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(annotations.as_bytes())
            .and_then(|_| out.flush())
    };
    if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY") {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&summary)
            .map_err(|e| Error::new(format!("cannot write the job summary: {}", io_reason(&e))))?;
        let _ = file.write_all(crate::gate::report::markdown_summary(p).as_bytes());
    }
    Ok(())
}

/// Read and check a saved profile.
fn read_profile(path: &Path) -> Result<model::Profile> {
    render::json::read(path, &path.display().to_string(), io_reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's rule for `-o FILE` without a format flag.
    #[test]
    fn report_format_follows_the_extension() {
        for (path, want) in [
            ("r.html", Format::Html),
            ("out/r.htm", Format::Html),
            ("r.txt", Format::Text),
            ("r.json", Format::Json),
            ("prof-{rank}", Format::Json),
            ("r.html.gz", Format::Json),
        ] {
            assert_eq!(format_for(Path::new(path)), want, "{path}");
        }
    }

    #[test]
    fn placeholder_values_name_no_directory_and_hold_no_control_character() {
        for (value, want) in [
            ("3", "3"),
            ("node1.cluster", "node1.cluster"),
            ("..", "__"),
            (".", "_"),
            ("...", "___"),
            (".hidden.", "_hidden_"),
            ("../../etc", "___.._etc"),
            ("a/b", "a_b"),
            ("/", "_"),
            ("", "_"),
            ("\x1b[2J\x07\n\r\0", "_[2J____"),
            ("r\u{202e}0", "r_0"),
        ] {
            assert_eq!(placeholder_value(value), want, "{value:?}");
        }
    }

    #[test]
    fn report_files_are_checked_and_written_atomically_where_they_can_be() {
        let dir = std::env::temp_dir().join(format!("mlprof-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.json");
        assert_eq!(file_write(&file).unwrap(), FileWrite::Atomic);
        assert_eq!(
            file_write(Path::new("/dev/full")).unwrap(),
            FileWrite::Direct
        );
        assert_eq!(
            file_write(Path::new("/dev/stdout")).unwrap(),
            FileWrite::Direct
        );
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(file_write(&link).is_err(), "a dangling link");
        write_file(&file, b"one").unwrap();
        assert_eq!(file_write(&link).unwrap(), FileWrite::Direct);
        write_file(&link, b"two").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        for bad in [dir.clone(), dir.join("missing/p.json"), file.join("x")] {
            let err = file_write(&bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("cannot write {}: ", bad.display())),
                "{err}"
            );
        }
        let err = write_file(Path::new("/dev/full"), b"x").unwrap_err();
        assert!(err.to_string().contains("No space left on device"), "{err}");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["link.json", "p.json"], "no temporary file left");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
