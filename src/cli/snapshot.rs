//! Snapshots of the profile while the command runs (`--snapshot-every`,
//! `--snapshot-on-signal`), made on a thread of their own at a lower priority and written over
//! the report file until the final report claims it.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::output::write_file;
use super::say;
use crate::error::Result;
use crate::gate::Gate;
use crate::render::{self, Format};
use crate::{collect, model, pipeline};

/// The nice value of the thread that makes snapshots.
pub(super) const SNAPSHOT_NICE: libc::c_int = 10;

/// What a snapshot is made of besides the recording, and where it goes.
pub(super) struct SnapshotJob {
    pub(super) path: PathBuf,
    pub(super) format: Format,
    pub(super) command: Vec<String>,
    pub(super) filter: model::Filter,
    pub(super) gate: Arc<Gate>,
    pub(super) gpu: collect::gpu::GpuView,
    pub(super) hints: bool,
    /// The text report's layout (a file's: `--width`, `COLUMNS` or the piped width).
    pub(super) style: render::text::Style,
}

/// Snapshots of the profile while the command runs (`--snapshot-every`,
/// `--snapshot-on-signal`): the collector hands over its recording so far
/// ([`collect::SnapshotSink`], shared rather than copied); a thread of its own copies it and
/// runs the final report's pipeline on it (native names, attribution, sources, budgets,
/// rendering) and replaces the report file atomically, until the final report claims the file.
/// One snapshot at a time: the collector hands over the next only once this one is done.
pub(super) struct Snapshotter {
    to: std::sync::mpsc::Sender<collect::Snapshot>,
    /// A snapshot is being made or written.
    busy: Arc<std::sync::atomic::AtomicBool>,
    /// Held while a snapshot is written; `true` once the final report has claimed the file.
    claimed: Arc<std::sync::Mutex<bool>>,
}

impl Snapshotter {
    pub(super) fn start(job: SnapshotJob) -> Snapshotter {
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
    pub(super) fn claim(&self) {
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
        let text = render::render_for(&profile, self.format, self.style)?;
        let claimed = claimed.lock().unwrap_or_else(|p| p.into_inner());
        if *claimed {
            return Ok(());
        }
        write_file(&self.path, text.as_bytes())
    }
}
