//! `mlprof sweep --param N=1000,2000,4000 -- COMMAND ...`: the command profiled once per value
//! (`{N}` replaced in its arguments, `N` set in its environment), each run an `mlprof run` of
//! its own (so a run killed for memory is a run that failed, not a sweep that did), then the
//! growth laws fitted (`model::sweep`) and rendered.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;

use super::{read_profile, write_text, Destination, FormatArgs};
use crate::error::{Error, Result, EXIT_USAGE};
use crate::model::sweep::{self, Outcome};
use crate::render::{self, Format};
use crate::sanitize::Clean;
use crate::units::bytes;

#[derive(Args)]
pub(super) struct SweepArgs {
    /// A parameter and its values, `NAME=V1,V2,V3` (positive numbers); `{NAME}` in the command
    /// is replaced by each value and `NAME` set in its environment. Repeat to sweep several
    /// parameters, one at a time around the first value of the others.
    #[arg(long = "param", value_name = "NAME=V1,V2,...", required = true)]
    params: Vec<String>,
    /// Project each line and the whole peak to this value, `NAME=V` (repeatable: one per
    /// parameter).
    #[arg(long = "project", value_name = "NAME=V")]
    project: Vec<String>,
    #[command(flatten)]
    format: FormatArgs,
    /// Write the result to FILE: format from --text/--json/--html, else from the extension
    /// (.html, .txt, otherwise JSON). Without it, a terminal report.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Keep each run's JSON profile in DIR (`NAME-VALUE.json`); otherwise they are removed.
    #[arg(long, value_name = "DIR")]
    runs_dir: Option<PathBuf>,
    /// Mean bytes allocated between two allocation samples, for every run.
    #[arg(long, value_name = "SIZE", default_value = super::DEFAULT_MEMORY_SAMPLE, value_parser = crate::units::size::parse)]
    memory_sample_bytes: u64,
    /// CPU samples per second, for every run.
    #[arg(long, value_name = "HZ", default_value_t = super::DEFAULT_RATE_HZ)]
    rate: u32,
    /// The command, with `{NAME}` where a parameter's value goes.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// A parameter and its values.
struct Param {
    name: String,
    texts: Vec<String>,
    values: Vec<f64>,
}

fn usage(message: String) -> Error {
    Error::with_code(message, EXIT_USAGE)
}

fn param(spec: &str) -> Result<Param> {
    let (name, values) = spec
        .split_once('=')
        .ok_or_else(|| usage(format!("--param {spec}: expected NAME=V1,V2,...")))?;
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(usage(format!(
            "--param {spec}: '{name}' is not a name (letters, digits, _)"
        )));
    }
    let texts: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    let mut numbers = Vec::new();
    for t in &texts {
        match t.parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => numbers.push(v),
            _ => {
                return Err(usage(format!(
                    "--param {spec}: '{t}' is not a positive number (growth is fitted on log axes)"
                )))
            }
        }
    }
    if texts.len() < 2 {
        return Err(usage(format!(
            "--param {spec}: needs at least two values to fit a growth"
        )));
    }
    Ok(Param {
        name: name.to_string(),
        texts,
        values: numbers,
    })
}

fn projections(specs: &[String], params: &[Param]) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for spec in specs {
        let (name, value) = spec
            .split_once('=')
            .ok_or_else(|| usage(format!("--project {spec}: expected NAME=V")))?;
        if !params.iter().any(|p| p.name == name) {
            return Err(usage(format!(
                "--project {spec}: '{name}' is not a swept parameter"
            )));
        }
        match value.trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => {
                out.insert(name.to_string(), v);
            }
            _ => {
                return Err(usage(format!(
                    "--project {spec}: '{value}' is not a positive number"
                )))
            }
        }
    }
    Ok(out)
}

/// A note when no argument of the command holds `{NAME}`: then the runs differ only in the
/// environment variable, and a program that does not read it runs alike every time (and every
/// line fits flat, or the table of lines is empty).
fn no_placeholder(command: &[OsString], name: &str) -> Option<String> {
    let placeholder = format!("{{{name}}}");
    let used = command
        .iter()
        .any(|a| a.to_str().is_some_and(|t| t.contains(&placeholder)));
    (!used).then(|| {
        format!(
            "sweep: the command has no {placeholder}: each run gets {name} only in its \
             environment (${name}); a program that does not read it runs alike every time"
        )
    })
}

/// `arg` with every `{NAME}` replaced.
fn substitute(arg: &OsString, values: &BTreeMap<String, String>) -> OsString {
    let Some(text) = arg.to_str() else {
        return arg.clone();
    };
    let mut out = text.to_string();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out.into()
}

/// Where runs' profiles go: the kept directory, or a private temporary one removed at the end.
struct RunsDir {
    path: PathBuf,
    remove: bool,
}

impl RunsDir {
    fn new(kept: Option<&Path>) -> Result<RunsDir> {
        if let Some(dir) = kept {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::new(format!("--runs-dir {}: {e}", dir.display())))?;
            return Ok(RunsDir {
                path: dir.to_path_buf(),
                remove: false,
            });
        }
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let path = base.join(format!("mlprof-sweep-{}-{attempt}", std::process::id()));
            let mut builder = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            if builder.create(&path).is_ok() {
                return Ok(RunsDir { path, remove: true });
            }
        }
        Err(Error::new(format!(
            "sweep: cannot create a private directory in {}",
            base.display()
        )))
    }
}

impl Drop for RunsDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// One run of the command with `values`, its profile read back.
fn run_once(
    args: &SweepArgs,
    dir: &RunsDir,
    param: &Param,
    i: usize,
    values: &BTreeMap<String, String>,
) -> Result<Outcome> {
    let file_name: String = values
        .iter()
        .map(|(k, v)| format!("{k}-{v}"))
        .collect::<Vec<_>>()
        .join("_")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.path.join(format!("{file_name}.json"));
    let _ = std::fs::remove_file(&path);
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(format!("sweep: cannot find the mlprof executable: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg("-q")
        .arg("--json")
        .arg("-o")
        .arg(&path)
        .arg("--rate")
        .arg(args.rate.to_string())
        .arg("--memory-sample-bytes")
        .arg(args.memory_sample_bytes.to_string())
        .arg("--");
    cmd.args(args.command.iter().map(|a| substitute(a, values)));
    for (k, v) in values {
        cmd.env(k, v);
    }
    // The program's own output goes to stderr: stdout carries the sweep's report.
    let out = {
        use std::os::fd::AsFd;
        std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_or_else(|_| Stdio::inherit(), Stdio::from)
    };
    cmd.stdout(out).stdin(Stdio::null());
    let started = std::time::Instant::now();
    let status = cmd
        .status()
        .map_err(|e| Error::new(format!("sweep: cannot start mlprof run: {e}")))?;
    let (profile, error) = match read_profile(&path) {
        Ok(p) => (Some(p), None),
        Err(_) => {
            let code = status.code();
            if let Some(c @ (crate::error::EXIT_NOT_FOUND | crate::error::EXIT_NOT_EXECUTABLE)) =
                code
            {
                // The command cannot start: no value will do better.
                return Err(Error::with_code(
                    "sweep: the command could not be started (see above); nothing was run",
                    c,
                ));
            }
            (
                None,
                Some(format!("no profile (mlprof run ended with {status})")),
            )
        }
    };
    let what = match &profile {
        Some(p) => match (p.exit.code, p.exit.signal) {
            (Some(0), _) => format!("peak heap {}", bytes(p.memory.peak_heap_bytes)),
            (_, Some(s)) => format!("killed by signal {s}: not fitted"),
            (Some(c), _) => format!("exit {c}: not fitted"),
            _ => "no exit status: not fitted".into(),
        },
        None => "no profile: not fitted".into(),
    };
    super::say(format_args!(
        "sweep: {}={}: {what} ({:.1} s)",
        param.name,
        Clean(&param.texts[i]),
        started.elapsed().as_secs_f64()
    ));
    Ok(Outcome {
        text: param.texts[i].clone(),
        value: param.values[i],
        fixed: values
            .iter()
            .filter(|(k, _)| **k != param.name)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        profile,
        path: (!dir.remove).then(|| path.display().to_string()),
        error,
    })
}

pub(super) fn sweep(args: SweepArgs) -> Result<i32> {
    let params = args
        .params
        .iter()
        .map(|s| param(s))
        .collect::<Result<Vec<_>>>()?;
    for (i, p) in params.iter().enumerate() {
        if params[..i].iter().any(|q| q.name == p.name) {
            return Err(usage(format!("--param {}: given twice", p.name)));
        }
    }
    let project = projections(&args.project, &params)?;
    let (format, destination) = super::document_output(args.output.clone(), args.format.chosen());
    if let Destination::File(path) = &destination {
        super::file_write(path)?;
    }
    let dir = RunsDir::new(args.runs_dir.as_deref())?;
    // Said once the arguments are known good, before the runs.
    for p in &params {
        if let Some(note) = no_placeholder(&args.command, &p.name) {
            super::say(format_args!("{note}"));
        }
    }
    // Runs already made, by the values of every parameter (the centre run is shared).
    let mut made: BTreeMap<BTreeMap<String, String>, usize> = BTreeMap::new();
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut sweeps = Vec::new();
    for p in &params {
        let mut mine = Vec::new();
        for i in 0..p.values.len() {
            let values: BTreeMap<String, String> = params
                .iter()
                .map(|q| {
                    let v = if q.name == p.name { i } else { 0 };
                    (q.name.clone(), q.texts[v].clone())
                })
                .collect();
            let index = match made.get(&values) {
                Some(&k) => k,
                None => {
                    outcomes.push(run_once(&args, &dir, p, i, &values)?);
                    made.insert(values, outcomes.len() - 1);
                    outcomes.len() - 1
                }
            };
            mine.push(index);
        }
        sweeps.push((p, mine));
    }
    let mut docs: Vec<sweep::Sweep> = sweeps
        .iter()
        .map(|(p, mine)| {
            let runs: Vec<Outcome> = mine
                .iter()
                .enumerate()
                .map(|(i, &k)| {
                    let o = &outcomes[k];
                    Outcome {
                        text: p.texts[i].clone(),
                        value: p.values[i],
                        fixed: params
                            .iter()
                            .filter(|q| q.name != p.name)
                            .map(|q| (q.name.clone(), q.texts[0].clone()))
                            .collect(),
                        profile: o.profile.clone(),
                        path: o.path.clone(),
                        error: o.error.clone(),
                    }
                })
                .collect();
            let fixed = runs.first().map(|o| o.fixed.clone()).unwrap_or_default();
            sweep::analyze(&p.name, fixed, &runs, project.get(&p.name).copied())
        })
        .collect();
    let mut doc = docs.remove(0);
    doc.more = docs;
    let text = match format {
        Format::Text => render::sweep::text(
            &doc,
            super::terminal::style_for(&destination, args.format.width).width,
        ),
        Format::Json => render::sweep::json(&doc)?,
        Format::Html => render::sweep::html(&doc)?,
    };
    write_text(&text, destination)?;
    let good = |s: &sweep::Sweep| s.runs.iter().any(|r| r.status == sweep::RunStatus::Ok);
    if !good(&doc) && !doc.more.iter().any(good) {
        return Err(Error::new("sweep: no run succeeded, so nothing was fitted"));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked_before_anything_runs() {
        assert!(param("N=1000,2000,4000").is_ok());
        for bad in ["N", "N=1000", "N=a,b", "N=0,1", "1N=1,2", "=1,2", "N-X=1,2"] {
            let e = param(bad).err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.exit_code(), EXIT_USAGE, "{bad}");
        }
        let p = vec![param("N=1,2").unwrap()];
        assert!(projections(&["N=8".into()], &p).is_ok());
        assert!(projections(&["M=8".into()], &p).is_err());
        assert!(projections(&["N=x".into()], &p).is_err());
    }

    #[test]
    fn a_command_without_the_placeholder_is_noted() {
        let with: Vec<OsString> = vec!["python".into(), "grow.py".into(), "--n={N}".into()];
        assert_eq!(no_placeholder(&with, "N"), None);
        let note = no_placeholder(&with[..2], "N").unwrap();
        assert!(note.contains("no {N}") && note.contains("($N)"), "{note}");
        assert!(no_placeholder(&with, "B").is_some());
    }

    #[test]
    fn every_placeholder_is_replaced() {
        let values: BTreeMap<String, String> = [
            ("N".to_string(), "10".to_string()),
            ("B".into(), "2".into()),
        ]
        .into();
        assert_eq!(
            substitute(&"--n={N}x{N},b={B},{C}".into(), &values),
            OsString::from("--n=10x10,b=2,{C}")
        );
    }
}
