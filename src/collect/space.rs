//! Watching the room left where channels are created. A process that starts when the
//! directory is full gets no channel and runs unprofiled (the preload library reserves a
//! channel's space up front rather than die of SIGBUS later): the report must say so.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Watches one directory's filesystem; notes the first time it had no room for a channel.
pub struct SpaceWatch {
    path: Option<CString>,
    /// Seconds from launch when free space first fell below one channel.
    full_at_ns: Option<u64>,
    /// When free space is looked at next (ns from launch; None: at the next tick).
    next_ns: Option<u64>,
}

/// How often free space is looked at while there is room for this many channels or more.
const LOOK_EVERY_NS: u64 = 500_000_000;
/// Channels' worth of free space (256 MiB at the default size) above which it is looked at
/// every [`LOOK_EVERY_NS`], not at every tick.
const ROOMY_CHANNELS: u64 = 256;

impl SpaceWatch {
    pub fn new(dir: &Path) -> SpaceWatch {
        SpaceWatch {
            path: CString::new(dir.as_os_str().as_bytes()).ok(),
            full_at_ns: None,
            next_ns: None,
        }
    }

    /// One tick at `now_ns` from launch: one `statvfs` (15 us; at every tick, 1.9% of the
    /// collector's CPU on a job of short children), at every tick while the room left is
    /// under [`ROOMY_CHANNELS`] channels, else every [`LOOK_EVERY_NS`] (a program filling a
    /// small filesystem, then freeing it, is full for moments).
    pub fn tick(&mut self, now_ns: u64) {
        if self.full_at_ns.is_some() || self.next_ns.is_some_and(|t| now_ns < t) {
            return;
        }
        let Some(free) = free_bytes(self.path.as_deref()) else {
            return;
        };
        if free < channel_bytes() {
            self.full_at_ns = Some(now_ns);
        }
        let roomy = free >= channel_bytes().saturating_mul(ROOMY_CHANNELS);
        self.next_ns = roomy.then(|| now_ns.saturating_add(LOOK_EVERY_NS));
    }

    /// The warning for the report, if the directory ran out of room.
    pub fn warning(&self, dir: &Path) -> Option<String> {
        self.full_at_ns.map(|t| {
            format!(
                "the channel directory's filesystem ({}) was out of space from {:.1} s: \
                 processes started after that ran unprofiled (free space in TMPDIR, or point \
                 TMPDIR elsewhere)",
                dir.parent().unwrap_or(dir).display(),
                t as f64 / 1e9
            )
        })
    }
}

/// Bytes of one channel file at the default size.
fn channel_bytes() -> u64 {
    mlprof_wire::file_bytes(mlprof_wire::DEFAULT_SLOTS) as u64
}

fn free_bytes(path: Option<&std::ffi::CStr>) -> Option<u64> {
    let path = path?;
    // SAFETY: statvfs is plain data, filled by the call below.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_with_room_is_not_reported_and_a_missing_one_is_ignored() {
        let mut watch = SpaceWatch::new(&std::env::temp_dir());
        watch.tick(0);
        assert_eq!(watch.warning(Path::new("/tmp/x")), None);
        let mut gone = SpaceWatch::new(Path::new("/nonexistent/mlprof"));
        gone.tick(0);
        assert_eq!(gone.warning(Path::new("/nonexistent/mlprof")), None);
    }
}
