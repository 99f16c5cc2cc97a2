//! Starting the profiled command: a private session directory, the preload library in
//! `LD_PRELOAD` (after any the user already has), inherited stdio, forwarded signals, and a
//! waiter that reports the exit status with the kernel's resource usage.

mod not_run;
mod session;
mod signals;
mod wait;

use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;

pub use session::Session;
pub use signals::{block_forwarded_signals, exit_status, forward_signals, watch_exit, Forwarding};

use crate::error::{Error, Result};
use crate::recording::ChildExit;

/// Default CPU sampling rate, per second of a thread's CPU time (see docs/benchmarks.md for how
/// it was chosen). The defaults are here once: `run`, `attach`, `sweep`, and `diff` and `sweep`
/// for a profile that does not say how it was sampled.
pub const DEFAULT_RATE_HZ: u32 = 100;
/// Default mean bytes between allocation samples, as the command line writes it.
pub const DEFAULT_MEMORY_SAMPLE: &str = "128KiB";
/// [`DEFAULT_MEMORY_SAMPLE`] in bytes.
pub const DEFAULT_MEMORY_SAMPLE_BYTES: u64 = 128 << 10;
/// Default mean bytes between copy samples, as the command line writes it.
pub const DEFAULT_COPY_SAMPLE: &str = "1MiB";
/// [`DEFAULT_COPY_SAMPLE`] in bytes.
pub const DEFAULT_COPY_SAMPLE_BYTES: u64 = 1 << 20;

/// What the preload library samples, passed through its environment.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// CPU samples per second of CPU time (0: off).
    pub rate_hz: u32,
    /// Mean bytes between allocation samples (0: off).
    pub memory_sample_bytes: u64,
    /// Mean bytes between copy samples (0: off).
    pub copy_sample_bytes: u64,
    /// Profile children too (fork children and programs the command runs).
    pub follow: bool,
    /// Record GPU kernel time with CUPTI (`--no-gpu-time` turns it off).
    pub gpu_time: bool,
    /// Trace PyTorch's CUDA allocator through the start-up hook (`--no-gpu-tensors` turns it
    /// off).
    pub gpu_tensors: bool,
}

/// A running profiled command.
pub struct Launched {
    /// Its process id.
    pub pid: u32,
    /// Receives its exit status once, when it ends.
    pub exited: Receiver<ChildExit>,
    /// What its preload library samples.
    pub sampling: Sampling,
}

/// Start `command` under the preload library, sampling as `sampling` says. With
/// `stdout_to_stderr`, the command's stdout goes to our stderr (so our stdout carries only
/// the report).
/// This process's place in a distributed job from its environment, by the first launcher
/// whose rank variable is set (`mlprof_wire::RANK_VARIABLES`: torchrun, Open MPI, MPICH, Slurm,
/// JAX): (rank, local rank, world size), as written.
pub fn env_rank() -> Option<(String, Option<String>, Option<String>)> {
    let get = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    mlprof_wire::RANK_VARIABLES
        .iter()
        .find_map(|&(rank, local, size)| Some((get(rank)?, get(local), get(size))))
}

pub fn spawn(
    session: &Session,
    command: &[OsString],
    stdout_to_stderr: bool,
    sampling: &Sampling,
) -> Result<Launched> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Error::new("no command given"))?;
    not_run::check(program)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("LD_PRELOAD", preload_value(session))
        .env(var(mlprof_wire::ENV_DIR), session.dir())
        .env(var(mlprof_wire::ENV_RATE), sampling.rate_hz.to_string())
        .env(
            var(mlprof_wire::ENV_MEMORY_SAMPLE),
            sampling.memory_sample_bytes.to_string(),
        )
        .env(
            var(mlprof_wire::ENV_COPY_SAMPLE),
            sampling.copy_sample_bytes.to_string(),
        );
    if !sampling.follow {
        cmd.env(var(mlprof_wire::ENV_NO_FOLLOW), "1");
    }
    if !sampling.gpu_time {
        cmd.env(var(mlprof_wire::ENV_GPU_KERNELS), "0");
    }
    let tensors = sampling.gpu_tensors && gpu_tensors_possible();
    cmd.env(
        var(mlprof_wire::ENV_GPU_TENSORS),
        if tensors { "1" } else { "0" },
    );
    if stdout_to_stderr {
        cmd.stdout(Stdio::from(
            std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| Error::new(format!("cannot duplicate stderr: {e}")))?,
        ));
    }
    signals::unblock_in_child(&mut cmd);
    let child = cmd.spawn().map_err(|e| not_run::error(program, &e))?;
    let pid = child.id();
    Ok(Launched {
        pid,
        exited: wait::spawn_waiter(child),
        sampling: *sampling,
    })
}

use std::os::fd::AsFd;

/// `LD_PRELOAD` for the child: the user's own value first (kept as is), then ours.
/// An environment variable name shared with the preload library (`mlprof_wire::ENV_*`).
fn var(name: &CStr) -> &OsStr {
    OsStr::from_bytes(name.to_bytes())
}

/// Whether PyTorch could ever initialise CUDA here, so that the preload library's PyTorch hook
/// is worth its cost (an audit hook makes CPython build every audit event's arguments: about
/// 0.1 us more for each `id()`, `sys._getframe()`, `open()`; `docs/benchmarks.md`): an NVIDIA
/// driver's device nodes (`/dev/nvidiactl`; WSL's `/dev/dxg`) or its `/proc` entry, or
/// `MLPROF_GPU_TENSORS=1` in mlprof's own environment (a driver elsewhere, the test fakes).
fn gpu_tensors_possible() -> bool {
    let forced = std::env::var_os(var(mlprof_wire::ENV_GPU_TENSORS)).is_some_and(|v| v == "1");
    forced
        || ["/dev/nvidiactl", "/dev/dxg", "/proc/driver/nvidia/version"]
            .iter()
            .any(|p| std::path::Path::new(p).exists())
}

fn preload_value(session: &Session) -> OsString {
    let ours = session.preload_path().as_os_str().to_owned();
    match std::env::var_os("LD_PRELOAD") {
        Some(existing) if !existing.is_empty() => {
            let mut value = existing;
            value.push(":");
            value.push(ours);
            value
        }
        _ => ours,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_sampling_means_say_the_same_in_words_and_bytes() {
        assert_eq!(
            crate::units::size::parse(DEFAULT_MEMORY_SAMPLE),
            Ok(DEFAULT_MEMORY_SAMPLE_BYTES)
        );
        assert_eq!(
            crate::units::size::parse(DEFAULT_COPY_SAMPLE),
            Ok(DEFAULT_COPY_SAMPLE_BYTES)
        );
    }
}
