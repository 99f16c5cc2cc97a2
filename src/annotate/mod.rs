//! The annotate stage: source text of the reported lines, read from the files when the profile
//! is made (after `model`, before the gate and the renderers), so that a saved profile renders
//! the same anywhere.
//!
//! File names come from code objects, which the profiled program controls (`compile(src,
//! "/dev/zero", "exec")` is legal Python): only regular files are read, opened without
//! blocking (a FIFO cannot stall the report), and none larger than [`MAX_FILE_BYTES`].

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use crate::model::Profile;

/// Longest source line kept (characters).
const MAX_CHARS: usize = 400;
/// Largest source file read; larger ones get no source text.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Fill `source` of every line whose file can be read.
pub fn attach(profile: &mut Profile) {
    let mut files: HashMap<String, Option<Vec<String>>> = HashMap::new();
    for line in &mut profile.lines {
        let text = files
            .entry(line.file.clone())
            .or_insert_with(|| read_lines(&line.file));
        if let Some(text) = text
            .as_ref()
            .and_then(|t| t.get((line.line as usize).checked_sub(1)?))
        {
            line.source = text.chars().take(MAX_CHARS).collect();
        }
    }
    // Stragglers and memory imbalance name lines of the table (or lines read the same way).
    let known: HashMap<(String, u32), String> = profile
        .lines
        .iter()
        .map(|l| ((l.file.clone(), l.line), l.source.clone()))
        .collect();
    let mut source_of = |file: &str, line: u32| {
        known
            .get(&(file.to_string(), line))
            .cloned()
            .unwrap_or_else(|| {
                files
                    .entry(file.to_string())
                    .or_insert_with(|| read_lines(file))
                    .as_ref()
                    .and_then(|t| t.get((line as usize).checked_sub(1)?))
                    .map(|t| t.chars().take(MAX_CHARS).collect())
                    .unwrap_or_default()
            })
    };
    for s in &mut profile.stragglers {
        s.source = source_of(&s.file, s.line);
    }
    for m in &mut profile.memory_imbalance {
        m.source = source_of(&m.file, m.line);
    }
}

fn read_lines(path: &str) -> Option<Vec<String>> {
    if !path.starts_with('/') {
        return None; // <string>, <stdin>, pseudo-files
    }
    let bytes = read_regular(path)?;
    Some(
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect(),
    )
}

/// The contents of `path` if it is a regular file of at most [`MAX_FILE_BYTES`].
fn read_regular(path: &str) -> Option<Vec<u8>> {
    let small_file = |meta: &std::fs::Metadata| meta.is_file() && meta.len() <= MAX_FILE_BYTES;
    // A cheap look first (no open of a device or FIFO at all in the usual case)...
    if !small_file(&std::fs::metadata(path).ok()?) {
        return None;
    }
    // ...then the file actually opened decides: it may have been replaced in between. Opening
    // with O_NONBLOCK returns at once even for a FIFO without a writer.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !small_file(&file.metadata().ok()?) {
        return None;
    }
    let mut bytes = Vec::new();
    // The file may grow while it is read: never more than the cap.
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_FILE_BYTES).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LineStats;
    use std::time::Instant;

    fn dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mlprof-sources-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn profile_of(files: &[&str]) -> Profile {
        Profile {
            lines: files
                .iter()
                .map(|f| LineStats {
                    file: f.to_string(),
                    line: 2,
                    ..LineStats::default()
                })
                .collect(),
            ..Profile::default()
        }
    }

    #[test]
    fn reads_regular_files_only_and_never_blocks() {
        let d = dir("kinds");
        let good = d.join("good.py");
        std::fs::write(&good, "a = 1\nb = 2   \n").unwrap();
        let fifo = d.join("pipe.py");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let big = d.join("big.py");
        let f = File::create(&big).unwrap();
        f.set_len(MAX_FILE_BYTES + 1).unwrap(); // sparse: cheap to make
        let files = [
            good.to_str().unwrap(),
            fifo.to_str().unwrap(),
            "/dev/zero",
            "/dev/urandom",
            big.to_str().unwrap(),
            d.to_str().unwrap(),
            "<string>",
            "/nonexistent/x.py",
        ];
        let mut profile = profile_of(&files);
        let started = Instant::now();
        attach(&mut profile);
        assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
        assert_eq!(profile.lines[0].source, "b = 2");
        for line in &profile.lines[1..] {
            assert_eq!(line.source, "", "{}", line.file);
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_at_the_cap_is_still_read() {
        let d = dir("cap");
        let path = d.join("cap.py");
        let mut text = b"x = 1\ny = 2\n".to_vec();
        text.resize(MAX_FILE_BYTES as usize, b'#');
        std::fs::write(&path, &text).unwrap();
        let mut profile = profile_of(&[path.to_str().unwrap()]);
        attach(&mut profile);
        assert_eq!(profile.lines[0].source, "y = 2");
        let _ = std::fs::remove_dir_all(&d);
    }
}
