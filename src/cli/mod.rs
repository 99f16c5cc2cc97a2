//! The command line: `mlprof run`, `report`, `export`, `check`, `merge`, `diff`, `sweep`,
//! `attach` and `jupyter`, parsed with clap (`args`) and carried out by wiring the stages:
//! launch → collect → pipeline → render. Where reports go is `output`'s; snapshots while the
//! command runs are `snapshot`'s.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use clap::Parser;

use crate::error::{Error, Result};
use crate::render::{self, Format};
use crate::sanitize::Clean;
use crate::{collect, launch, model, pipeline, symbolize};

mod args;
mod jupyter;
mod output;
mod regions;
mod snapshot;
mod suggest;
mod sweep;
mod terminal;

use args::*;
use output::{
    ci_outputs, destination, document_output, emit, file_write, io_reason, run_destination,
    write_bytes, write_text, Destination, FileWrite,
};
use snapshot::{SnapshotJob, Snapshotter};

pub use crate::launch::{DEFAULT_COPY_SAMPLE, DEFAULT_MEMORY_SAMPLE, DEFAULT_RATE_HZ};

pub fn run(args: impl IntoIterator<Item = OsString>) -> Result<i32> {
    let args: Vec<OsString> = args.into_iter().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(mut err) => {
            suggest::nearest_option(&mut err, &<Cli as clap::CommandFactory>::command(), &args);
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
            let name = args.name.clone();
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
            // What to type where a kernel is chosen by name rather than from a menu.
            println!(
                "its name is {0}: `jupyter console --kernel {0}`, `jupyter nbconvert --execute \
                 --ExecutePreprocessor.kernel_name={0}`, `papermill -k {0}`, nbclient's \
                 `kernel_name=\"{0}\"`",
                Clean(&name)
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
    tell_warnings(&profile.warnings, &destination, format, false);
    let report_on_stdout = matches!(destination, Destination::Stdout);
    emit(&profile, format, destination, args.format.width)?;
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
        gpu_time: !args.no_gpu_time,
        gpu_tensors: !args.no_gpu_tensors,
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
            style: terminal::style(None, args.format.width),
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
    tell_warnings(&profile.warnings, &destination, format, args.quiet);
    let report_on_stdout = matches!(destination, Destination::Stdout);
    if let Some(snapshotter) = &snapshotter {
        // From here on the file is the final report's: a snapshot being written is waited
        // for, and none is written after it.
        snapshotter.claim();
    }
    // In CI (a budget, a baseline or --junit) a run whose report is lost must not pass.
    let ci = gate.any() || args.junit.is_some();
    let mut lost = false;
    let fails = if ci && status == 0 {
        " (exit status 70: in CI a lost report fails the run)"
    } else {
        ""
    };
    if let Err(e) = emit(&profile, format, destination, args.format.width) {
        say(format_args!("report not written: {e}{fails}"));
        lost = true;
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
        say(format_args!("{e}{fails}"));
        lost = true;
    }
    forwarding.stop.store(true, Ordering::Relaxed);
    Ok(if lost && !fails.is_empty() {
        crate::error::EXIT_ERROR
    } else {
        status
    })
}

/// The profile's warnings on stderr where the report is not the terminal's: none with `-q`
/// (the program's stderr stays the program's), else one line, the first warning and how many
/// more the report holds. Every warning stays in the profile and each report format.
fn tell_warnings(warnings: &[String], destination: &Destination, format: Format, quiet: bool) {
    let in_the_terminal = matches!(destination, Destination::Stderr) && format == Format::Text;
    let Some(first) = warnings.first().filter(|_| !quiet && !in_the_terminal) else {
        return;
    };
    match warnings.len() - 1 {
        0 => say(format_args!("warning: {}", Clean(first))),
        more => say(format_args!(
            "warning: {} (and {more} more warning{} in the report)",
            Clean(first),
            if more == 1 { "" } else { "s" }
        )),
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

fn report(args: ReportArgs) -> Result<i32> {
    let mut profile = read_profile(&args.profile)?;
    // Hints drawn again, by this version's rules.
    pipeline::redraw_hints(&mut profile, !args.no_hints);
    let format = args.format.chosen().unwrap_or(Format::Text);
    let destination = args.output.map_or(Destination::Stdout, Destination::File);
    emit(&profile, format, destination, args.format.width)?;
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
    emit(&merged, format, destination, args.format.width)?;
    Ok(0)
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
        Format::Text => render::diff::text(
            &d,
            terminal::style_for(&destination, args.format.width).width,
        ),
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
    if let (ExportFormat::ChromeTrace, Some(_)) = (args.format, args.measure) {
        return Err(Error::with_code(
            "--measure does not apply to --format chrome-trace: a trace holds every counter track",
            crate::error::EXIT_USAGE,
        ));
    }
    let measure = args.measure.unwrap_or(render::Measure::Cpu);
    let profile = read_profile(&args.profile)?;
    let out = match args.format {
        ExportFormat::Folded => render::folded::render(&profile, measure).into_bytes(),
        ExportFormat::Speedscope => render::speedscope::render(&profile, measure)?.into_bytes(),
        ExportFormat::Pprof => render::pprof::render(&profile, measure)?,
        ExportFormat::ChromeTrace => render::chrome::render(&profile)?.into_bytes(),
    };
    write_bytes(
        &out,
        args.output.map_or(Destination::Stdout, Destination::File),
    )?;
    Ok(0)
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

/// Read and check a saved profile.
fn read_profile(path: &Path) -> Result<model::Profile> {
    render::json::read(path, &path.display().to_string(), io_reason)
}
