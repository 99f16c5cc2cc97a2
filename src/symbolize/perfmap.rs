//! Names of code generated at run time, from the perf map a runtime writes for it
//! (`/tmp/perf-PID.map`: one `START SIZE NAME` line per function, hexadecimal, as perf reads
//! it; CPython 3.12+ with `-X perf`, and JIT compilers that support perf). Read after the run:
//! the file is the program's, so it is untrusted. Only a regular file of this user, at most
//! [`MAX_BYTES`], is read; malformed lines are skipped; names are capped in length.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Largest perf map read.
const MAX_BYTES: u64 = 64 << 20;
/// Longest name kept.
const MAX_NAME: usize = 512;

/// One process's perf map: (start, end, name), sorted by start.
#[derive(Debug, Default)]
pub struct PerfMap {
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    /// The perf map of `pid` in the system's temporary directory, if it has one.
    pub fn of_pid(pid: u32) -> Option<PerfMap> {
        Self::load(Path::new(&format!("/tmp/perf-{pid}.map")))
    }

    /// Read and parse a perf map file.
    pub fn load(path: &Path) -> Option<PerfMap> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let fits = |meta: &std::fs::Metadata| {
            meta.is_file() && meta.uid() == uid && meta.len() <= MAX_BYTES
        };
        // Looked at before opening (never a FIFO), and again once open (it may have been
        // swapped in between): open neither waits nor follows a link, and reads stop at the cap.
        if !fits(&std::fs::symlink_metadata(path).ok()?) {
            return None;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
            .open(path)
            .ok()?;
        if !fits(&file.metadata().ok()?) {
            return None;
        }
        let mut text = Vec::new();
        file.take(MAX_BYTES).read_to_end(&mut text).ok()?;
        Some(Self::parse(&String::from_utf8_lossy(&text)))
    }

    /// Parse perf map text.
    pub fn parse(text: &str) -> PerfMap {
        let mut entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, ' ');
                let start =
                    u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
                let size = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
                let name: String = fields.next()?.trim().chars().take(MAX_NAME).collect();
                (size > 0 && !name.is_empty()).then(|| (start, start.saturating_add(size), name))
            })
            .collect();
        entries.sort_by_key(|e| e.0);
        PerfMap { entries }
    }

    /// The name of the function holding `ip` (the latest entry wins where code was reused).
    pub fn lookup(&self, ip: u64) -> Option<&str> {
        let pos = self.entries.partition_point(|e| e.0 <= ip);
        self.entries[..pos]
            .iter()
            .rev()
            .take(64)
            .find(|e| ip < e.1)
            .map(|e| e.2.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_and_bad_lines_skipped() {
        let map = PerfMap::parse(
            "7f0000001000 40 py::f:/w/a.py\n\
             0x7f0000002000 0x100 jitted_kernel\n\
             garbage line\n\
             7f0000003000 0 empty\n\
             zz 10 bad\n",
        );
        assert_eq!(map.lookup(0x7f00_0000_1010), Some("py::f:/w/a.py"));
        assert_eq!(map.lookup(0x7f00_0000_1040), None);
        assert_eq!(map.lookup(0x7f00_0000_20ff), Some("jitted_kernel"));
        assert_eq!(map.lookup(0x7f00_0000_3000), None);
        assert_eq!(map.lookup(0x10), None);
    }

    #[test]
    fn a_fifo_or_a_link_is_not_read() {
        let dir = std::env::temp_dir().join(format!("mlprof-perfmap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf-1.map");
        std::fs::write(&path, "7f0000001000 40 f\n").unwrap();
        assert!(PerfMap::load(&path).is_some());
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(PerfMap::load(&path).is_none());
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(PerfMap::load(&path).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
