//! Whether the session directory may have new entries since the last scan, told by its
//! modification time: a scan reads every entry (`getdents`) and looks each name up among the
//! channels, which grows with every process the run has had (40 short-lived children made it a
//! tenth of the collector's time); a `stat` of the directory does not grow.
//!
//! A directory's mtime is set from the kernel's coarse clock (one scheduler tick, up to 10 ms,
//! behind), so an entry made just after a scan can leave the mtime the scan saw unchanged.
//! The directory is therefore scanned again whenever its mtime is within [`SETTLE`] of when
//! the last scan began, as well as whenever it changed.
//!
//! The directory is kept open and its mtime read with `fstat` on it: a `stat` of its path
//! walks the path at every tick (25 us here, an eighth of an idle run's collector CPU). A
//! directory removed under it (no links left) is opened again by path.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How far the mtime the last scan saw must lie before that scan for an unchanged mtime to
/// prove that nothing was added since: well over the coarse clock's tick.
const SETTLE: Duration = Duration::from_millis(100);

/// What the last full scan saw.
#[derive(Default)]
pub struct DirChange {
    /// The directory's mtime read just before the last scan (seconds, nanoseconds).
    mtime: Option<(i64, i64)>,
    /// When that scan began.
    scanned: Option<SystemTime>,
    /// The directory, open.
    open: Option<File>,
}

impl DirChange {
    /// Whether `dir` needs a scan now. When it does, the caller scans at once: the mtime read
    /// here is the one the scan is taken against.
    pub fn due(&mut self, dir: &Path) -> bool {
        let now = SystemTime::now();
        let meta = match self.open.take().or_else(|| File::open(dir).ok()) {
            Some(file) => file
                .metadata()
                .ok()
                .filter(|m| m.nlink() > 0)
                .map(|m| (m, file)),
            None => None,
        };
        let Some((meta, file)) = meta else {
            self.mtime = None;
            return true; // let the scan say what is wrong
        };
        self.open = Some(file);
        let mtime = (meta.mtime(), meta.mtime_nsec());
        let settled = self.scanned.is_some_and(|scanned| {
            let at = SystemTime::UNIX_EPOCH
                + Duration::new(mtime.0.max(0) as u64, mtime.1.clamp(0, 999_999_999) as u32);
            at + SETTLE < scanned
        });
        if self.mtime == Some(mtime) && settled {
            return false;
        }
        self.mtime = Some(mtime);
        self.scanned = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_entry_is_always_seen_and_a_quiet_directory_is_not_read() {
        let dir = std::env::temp_dir().join(format!("mlprof-dirchange-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let mut change = DirChange::default();
        assert!(change.due(&dir), "the first look scans");
        // Within the settling time every look scans (an entry made in the same coarse tick
        // as the last scan leaves the mtime as it was).
        assert!(change.due(&dir));
        std::fs::write(dir.join("a"), b"").unwrap();
        assert!(change.due(&dir), "an entry just made is seen");
        std::thread::sleep(SETTLE + Duration::from_millis(20));
        assert!(change.due(&dir), "the scan after the settling time");
        assert!(!change.due(&dir), "nothing new: no scan");
        std::fs::write(dir.join("b"), b"").unwrap();
        assert!(change.due(&dir), "a new entry after a quiet spell is seen");
        // Removed and made again: the new directory is looked at.
        std::thread::sleep(SETTLE + Duration::from_millis(20));
        assert!(change.due(&dir));
        assert!(!change.due(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            change.due(&dir),
            "a removed directory is scanned (the scan says what is wrong)"
        );
        std::fs::create_dir(&dir).unwrap();
        std::thread::sleep(SETTLE + Duration::from_millis(20));
        assert!(change.due(&dir));
        assert!(!change.due(&dir), "the directory made again, quiet");
        std::fs::write(dir.join("c"), b"").unwrap();
        assert!(
            change.due(&dir),
            "an entry of the directory made again is seen"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
