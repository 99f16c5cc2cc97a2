//! Test fixture: the mlprof binary, the installed CPythons (every build of mlprof's layout
//! list, `builds`: the default builds in `pythons`, the free-threaded ones apart), the ones with
//! numpy (virtual environments made by `scripts/test.sh`), and helpers to run a profiled
//! command and read its profile.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mlprof::model::{invariants, Profile};

/// The `mlprof` binary under test.
/// The `mlprof` binary, with `MLPROF_GPU_TENSORS=1`: its runs ask PyTorch (here: the fake in
/// tests/fake-torch) for tensors as on a machine with an NVIDIA driver, whose PyTorch hook is
/// then in every Python process (`gpu_tensors::without_a_driver_no_hook_is_set_up` tests the
/// other way).
pub fn mlprof() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mlprof"));
    c.env("MLPROF_GPU_TENSORS", "1");
    c
}

/// Repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A test script by name (`tests/scripts/NAME`).
pub fn script(name: &str) -> PathBuf {
    root().join("tests/scripts").join(name)
}

/// A test script (`tests/scripts/NAME`) or, when there is none, an example (`examples/NAME`).
pub fn script_or_example(name: &str) -> PathBuf {
    let path = script(name);
    if path.exists() {
        path
    } else {
        root().join("examples").join(name)
    }
}

/// One interpreter to test with.
#[derive(Clone, Debug)]
pub struct Python {
    /// Path of the executable.
    pub exe: PathBuf,
    /// `3.11` (`3.13t` for a free-threaded build).
    pub minor: String,
    /// A free-threaded (`Py_GIL_DISABLED`) build.
    pub free_threaded: bool,
}

impl Python {
    /// `(3, 14)`.
    pub fn version(&self) -> (u8, u8) {
        let mut parts = self.minor.trim_end_matches('t').split('.');
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (next(), next())
    }
}

fn found(var: &str, default: fn() -> Vec<PathBuf>) -> Vec<Python> {
    let paths = match std::env::var_os(var) {
        Some(list) => std::env::split_paths(&list)
            .filter(|p| p.exists())
            .collect(),
        None => default(),
    };
    paths.into_iter().filter_map(identify).collect()
}

fn identify(exe: PathBuf) -> Option<Python> {
    let out = Command::new(&exe)
        .args([
            "-c",
            "import sys, sysconfig; print('%d.%d%s' % (sys.version_info[:2] + \
             ('t' if sysconfig.get_config_var('Py_GIL_DISABLED') else '',)))",
        ])
        .output()
        .ok()?;
    let minor = String::from_utf8_lossy(&out.stdout).trim().to_string();
    out.status.success().then(|| Python {
        free_threaded: minor.ends_with('t'),
        minor,
        exe,
    })
}

/// Every CPython build mlprof reads (`3.9` … `3.15`, `3.13t` …), from its layout list: the
/// one list the tests, the scripts and the messages share.
pub fn builds() -> Vec<String> {
    mlprof_pyframes::layouts::ALL
        .iter()
        .map(|l| format!("3.{}{}", l.minor, if l.free_threaded { "t" } else { "" }))
        .collect()
}

/// Where the interpreters pyenv does not have are prepared (`scripts/pythons.sh`): Debian's
/// 3.14 and 3.15 under `target/cpython-3.X/usr/bin`, a free-threaded build under
/// `target/cpython-3.Xt/bin`.
fn prepared(build: &str) -> PathBuf {
    let dir = root().join("target").join(format!("cpython-{build}"));
    let exe = format!("python{build}");
    let debian = dir.join("usr/bin").join(&exe);
    if debian.exists() {
        debian
    } else {
        dir.join("bin").join(exe)
    }
}

/// The installed interpreter of `build`: pyenv's newest `3.X.N`, else one prepared under
/// `target/`, else `python3.X` on `PATH`.
fn find_build(build: &str) -> Option<PathBuf> {
    let home = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))
        .unwrap_or_default();
    if !build.ends_with('t') {
        if let Some(exe) = newest_pyenv(&home.join("versions"), build) {
            return Some(exe);
        }
    }
    let exe = prepared(build);
    if exe.exists() {
        return Some(exe);
    }
    let name = format!("python{build}");
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(&name))
            .find(|p| p.exists())
    })
}

/// Say, once per list, which builds of the layout list were not found: a counted skip.
fn report_missing(what: &str, all: &[Python], wanted: &[String]) {
    for build in wanted {
        if !all.iter().any(|p| &p.minor == build) {
            skipped(&format!(
                "skipped for CPython {build}: no {what} found (scripts/pythons.sh prepares one)"
            ));
        }
    }
}

/// Every installed default-build CPython mlprof reads, oldest first (pyenv, then the ones
/// `scripts/pythons.sh` prepares under `target/`, then `PATH`), or those in
/// `MLPROF_TEST_PYTHONS` (a PATH-style list; its free-threaded ones go to [`free_threaded`]).
/// Panics if there is none: these tests are about real interpreters.
pub fn pythons() -> &'static [Python] {
    static ALL: OnceLock<Vec<Python>> = OnceLock::new();
    ALL.get_or_init(|| {
        let all: Vec<Python> = every_python()
            .iter()
            .filter(|p| !p.free_threaded)
            .cloned()
            .collect();
        assert!(
            !all.is_empty(),
            "no CPython found (set MLPROF_TEST_PYTHONS)"
        );
        eprintln!("pythons under test: {}", names(&all));
        all
    })
}

/// The installed free-threaded CPythons (3.13t …), oldest first; may be none (a counted skip).
pub fn free_threaded() -> &'static [Python] {
    static ALL: OnceLock<Vec<Python>> = OnceLock::new();
    ALL.get_or_init(|| {
        every_python()
            .iter()
            .filter(|p| p.free_threaded)
            .cloned()
            .collect()
    })
}

/// Every default build, then every free-threaded one: for the tests of what the frame reader
/// and the allocator wrapper do, which every build must pass.
pub fn every_build() -> Vec<&'static Python> {
    pythons().iter().chain(free_threaded()).collect()
}

/// The oldest and the newest default build: for tests of what does not depend on how an
/// interpreter is read (the CLI, renderers, budgets, process trees), which would only repeat
/// themselves on every minor between.
pub fn spread(all: &'static [Python]) -> Vec<&'static Python> {
    let mut out: Vec<&Python> = all.first().into_iter().collect();
    if let Some(last) = all.last().filter(|_| all.len() > 1) {
        out.push(last);
    }
    out
}

fn every_python() -> &'static [Python] {
    static ALL: OnceLock<Vec<Python>> = OnceLock::new();
    ALL.get_or_init(|| {
        let wanted = builds();
        let mut all = found("MLPROF_TEST_PYTHONS", || {
            builds().iter().filter_map(|b| find_build(b)).collect()
        });
        all.sort_by_key(|p| (p.free_threaded, p.version()));
        if std::env::var_os("MLPROF_TEST_PYTHONS").is_none() {
            report_missing("interpreter", &all, &wanted);
        }
        all
    })
}

/// The CPythons with numpy: `target/test-venvs/py3.X` made by `scripts/test.sh` (default
/// builds, oldest first), or `MLPROF_TEST_NUMPY_PYTHONS`. Panics if there is none.
pub fn numpy_pythons() -> &'static [Python] {
    static ALL: OnceLock<Vec<Python>> = OnceLock::new();
    ALL.get_or_init(|| {
        let all: Vec<Python> = every_numpy_python()
            .iter()
            .filter(|p| !p.free_threaded)
            .cloned()
            .collect();
        assert!(
            !all.is_empty(),
            "no Python with numpy found: run scripts/test.sh (it creates target/test-venvs)"
        );
        eprintln!("numpy pythons under test: {}", names(&all));
        all
    })
}

/// The free-threaded CPythons with numpy (`target/test-venvs/py3.13t` …); may be none.
pub fn numpy_free_threaded() -> &'static [Python] {
    static ALL: OnceLock<Vec<Python>> = OnceLock::new();
    ALL.get_or_init(|| {
        every_numpy_python()
            .iter()
            .filter(|p| p.free_threaded)
            .cloned()
            .collect()
    })
}

/// Every numpy build, default then free-threaded.
pub fn every_numpy_build() -> Vec<&'static Python> {
    numpy_pythons()
        .iter()
        .chain(numpy_free_threaded())
        .collect()
}

fn every_numpy_python() -> &'static [Python] {
    static ALL: OnceLock<Vec<Python>> = OnceLock::new();
    ALL.get_or_init(|| {
        let wanted = builds();
        let mut all = found("MLPROF_TEST_NUMPY_PYTHONS", || {
            let venvs = root().join("target/test-venvs");
            builds()
                .iter()
                .map(|b| venvs.join(format!("py{b}/bin/python")))
                .filter(|p| p.exists())
                .collect()
        });
        all.sort_by_key(|p| (p.free_threaded, p.version()));
        if std::env::var_os("MLPROF_TEST_NUMPY_PYTHONS").is_none() {
            report_missing("venv with numpy", &all, &wanted);
        }
        all
    })
}

fn names(all: &[Python]) -> String {
    all.iter()
        .map(|p| p.minor.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn newest_pyenv(versions: &Path, minor: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(versions)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(OsStr::to_str).unwrap_or("");
            name.strip_prefix(minor)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|patch| patch.chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    dirs.sort();
    let exe = dirs.pop()?.join("bin").join(format!("python{minor}"));
    exe.exists().then_some(exe)
}

/// Result of one profiled run.
pub struct Run {
    /// What the mlprof process printed and its status.
    pub output: Output,
    /// The profile it wrote.
    pub profile: Profile,
}

/// `mlprof run -o TMP -- args...`, checking the profile's invariants.
pub fn profile(args: &[&OsStr]) -> Run {
    profile_args(&[], args, &[])
}

/// `profile` with extra environment for the program.
pub fn profile_with_env(args: &[&OsStr], env: &[(&str, &str)]) -> Run {
    profile_args(&[], args, env)
}

/// The CPU the profile's samples hold, all threads (Python, native and the kernel's on page faults; no
/// waiting).
pub fn sampled_cpu(p: &Profile) -> f64 {
    p.threads
        .iter()
        .map(|t| t.cpu_python_s + t.cpu_native_s + t.kernel_s)
        .sum()
}

/// The mean CPU between two samples of a thread: the CPU the profile sampled over its
/// samples. A sample stands for its thread's CPU since the previous one, so the line that
/// follows another gets up to one gap of the line before it. On a quiet machine a gap is the
/// 10 ms interval; on one busier than its cores the kernel fires a thread's timer only at ticks
/// that find it running, and gaps grow.
pub fn mean_gap(p: &Profile) -> f64 {
    sampled_cpu(p) / p.cpu_samples.max(1) as f64
}

/// What the sample straddling a line's boundary may carry across it: `gaps` mean gaps, or the
/// run's largest sample when that is more. On a machine busier than its cores the kernel fires
/// a thread's CPU timer late, by up to half a second of the thread's CPU (a C loop without
/// mlprof shows it too), so one sample can hold far more than a mean gap.
pub fn straddle(p: &Profile, gaps: f64) -> f64 {
    let largest = p.samples.iter().map(|s| s.cpu_s).fold(0.0, f64::max);
    largest.max(gaps * mean_gap(p))
}

/// Whether stack `stack` of `p` (an index into `stacks`, as a sample has) has its innermost
/// frame of a file ending in `script` at `line`.
pub fn stack_at(p: &Profile, stack: u32, script: &str, line: u32) -> bool {
    p.stacks.get(stack as usize).is_some_and(|s| {
        s.frames
            .iter()
            .rev()
            .filter_map(|&f| p.stack_frames.get(f as usize))
            .find(|f| f.file.ends_with(script))
            .is_some_and(|f| f.line == line)
    })
}

/// `mlprof run OPTIONS -o TMP -- args...` with `env` set, checking the profile.
pub fn profile_args(options: &[&str], args: &[&OsStr], env: &[(&str, &str)]) -> Run {
    let (output, _, text) = run_mlprof(options, args, env, Duration::from_secs(600));
    let text = text.unwrap_or_else(|| {
        panic!(
            "no profile written; stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let profile = check_profile(&text);
    Run { output, profile }
}

/// `mlprof run OPTIONS -o TMP -- args...` with `env` set: what it printed and its status, how
/// long it took, and the profile's text if it wrote one. mlprof is killed, and the test fails,
/// once it has run for `limit`: a hang is a failure, not a stuck test.
pub fn run_mlprof(
    options: &[&str],
    args: &[&OsStr],
    env: &[(&str, &str)],
    limit: Duration,
) -> (Output, Duration, Option<String>) {
    let dir = tempdir();
    let out_path = dir.join("profile.json");
    let started = Instant::now();
    let mut child = mlprof()
        .arg("run")
        .args(options)
        .arg("-o")
        .arg(&out_path)
        .arg("--")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mlprof");
    let mut pipes = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .map(|pipe| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    })
    .into_iter();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for mlprof") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{args:?}: mlprof still running after {limit:?} (hung); killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let stdout = pipes.next().unwrap().join().unwrap();
    let stderr = pipes.next().unwrap().join().unwrap();
    let profile = std::fs::read_to_string(&out_path).ok();
    let _ = std::fs::remove_dir_all(&dir);
    let output = Output {
        status,
        stdout,
        stderr,
    };
    (output, elapsed, profile)
}

/// `mlprof run OPTIONS -- PROGRAM...` with `env` set for the program and no stdin: what it
/// printed and its status.
pub fn run<O: AsRef<OsStr>, P: AsRef<OsStr>>(
    options: &[O],
    program: &[P],
    env: &[(&str, &OsStr)],
) -> Output {
    mlprof()
        .arg("run")
        .args(options)
        .arg("--")
        .args(program)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run mlprof")
}

/// `mlprof run -q -o PATH -- PROGRAM...` with `env` set for the program (its stdout left
/// out): fails the test unless mlprof succeeded. The profile is at `path` (or where its
/// placeholders say).
pub fn run_to<P: AsRef<OsStr>>(path: &Path, program: &[P], env: &[(&str, &str)]) {
    let out = mlprof()
        .args(["run", "-q", "-o"])
        .arg(path)
        .arg("--")
        .args(program)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .output()
        .expect("run mlprof");
    let program: Vec<&OsStr> = program.iter().map(AsRef::as_ref).collect();
    assert!(
        out.status.success(),
        "mlprof run {program:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `profile_with_env` of `PYTHON tests/scripts/SCRIPT ARGS...`: fails the test, naming the
/// Python, unless the run succeeded.
pub fn profile_script(py: &Python, script_name: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let script = script(script_name);
    let mut argv = vec![os(&py.exe), os(&script)];
    argv.extend(args.iter().map(os));
    let run = profile_with_env(&argv, env);
    assert!(
        run.output.status.success(),
        "{}: {}",
        py.minor,
        String::from_utf8_lossy(&run.output.stderr)
    );
    run
}

/// `mlprof COMMAND PROFILE ARGS...` (report, export): its stdout; fails the test unless it
/// succeeded.
pub fn read_with(command: &str, profile: &Path, args: &[&str]) -> String {
    let out = mlprof()
        .arg(command)
        .arg(profile)
        .args(args)
        .output()
        .expect("run mlprof");
    assert!(
        out.status.success(),
        "mlprof {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// `mlprof merge PROFILES... -o OUT`: fails the test unless it succeeded.
pub fn merge<P: AsRef<OsStr>>(profiles: impl IntoIterator<Item = P>, out: &Path) {
    let done = mlprof()
        .arg("merge")
        .args(profiles)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run mlprof merge");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
}

/// Parse a JSON profile, validate it against `docs/profile-schema.json`, check invariants.
pub fn check_profile(text: &str) -> Profile {
    static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
    let validator = SCHEMA.get_or_init(|| {
        let schema = std::fs::read_to_string(root().join("docs/profile-schema.json")).unwrap();
        jsonschema::validator_for(&serde_json::from_str(&schema).unwrap()).expect("valid schema")
    });
    let value: serde_json::Value = serde_json::from_str(text).expect("JSON");
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "profile does not match docs/profile-schema.json: {errors:?}"
    );
    let profile = mlprof::render::json::parse(text, "profile").expect("valid profile");
    assert_eq!(invariants::violations(&profile), Vec::<String>::new());
    profile
}

/// The names of the entries of `dir`, sorted.
pub fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A fresh private temporary directory.
pub fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mlprof-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Shorthand: `OsStr` of anything path-like.
pub fn os<S: AsRef<OsStr> + ?Sized>(s: &S) -> &OsStr {
    s.as_ref()
}

/// |a - b| <= tolerance * b.
pub fn within(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * b
}

/// A test (or a part of one) that cannot run here says so: `skipped: …` on stderr and, when
/// `scripts/test.sh` asks for it (`MLPROF_TEST_SKIPS` names a file), a line in that file, so
/// that the run's total reports it as skipped rather than only as passed. With
/// `MLPROF_REQUIRE_ALL=1` (a machine meant to have every tool) the skip fails the test instead,
/// with the message as the panic's.
pub fn skipped(message: &str) {
    mlprof::test_skip::skipped(message);
}
