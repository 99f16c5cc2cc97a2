//! Regions the program marked (`mlprof.mark`, the pytest plugin's tests), on the `run` side:
//! answering a region that ended asking for its report while the program waits (the pytest
//! plugin names the lines of a test over its memory limit), and writing one HTML page per
//! region after the run (`--regions-html DIR`). See docs/design/regions.md.

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use crate::collect::{RegionRequest, RegionSink, Snapshot};
use crate::error::{Error, Result};
use crate::recording::Recording;
use crate::symbolize::NativeNames;
use crate::{model, pipeline};

/// Answers report requests on a thread of its own: for each, the region's summary as JSON in
/// `<run dir>/region-<pid>-<id>.json` (0600, written under a temporary name and renamed, so
/// the program never reads half a file). Native functions are not named while the program
/// waits (only told from Python by the maps), except for a page request.
pub struct Reporter {
    to: Sender<(Snapshot, Vec<RegionRequest>)>,
}

impl Reporter {
    /// Start the thread; answers go into `dir` (the run's private directory); pages get hints
    /// unless `hints` is off (`--no-hints`).
    pub fn start(dir: PathBuf, filter: model::Filter, hints: bool) -> Reporter {
        let (to, from) = std::sync::mpsc::channel::<(Snapshot, Vec<RegionRequest>)>();
        std::thread::spawn(move || {
            for (snapshot, requests) in from {
                // Most requests come one at a time (a test ends); each gets a cut of its own.
                let from_ns = begin_of(&snapshot, &requests);
                let recording = snapshot.recording_from(from_ns, |c| {
                    requests
                        .iter()
                        .any(|r| r.pid == c.pid && r.start_ns == c.start_ns)
                        || c.start_ns >= from_ns
                });
                for request in requests {
                    // A failure (the run's directory gone at the end) leaves the program to
                    // its own figures: it waits a bounded time and goes on without lines.
                    let options = pipeline::Options {
                        filter: &filter,
                        hints,
                        gate: None,
                    };
                    let _ = answer(&recording, &request, &dir, &options);
                }
            }
        });
        Reporter { to }
    }
}

impl RegionSink for Reporter {
    fn report(&self, snapshot: Snapshot, requests: Vec<RegionRequest>) {
        let _ = self.to.send((snapshot, requests));
    }
}

/// The earliest begin of the regions asked for (0 if one is not found: everything is kept).
fn begin_of(snapshot: &Snapshot, requests: &[RegionRequest]) -> u64 {
    requests
        .iter()
        .map(|r| {
            snapshot
                .channels()
                .iter()
                .filter(|c| c.pid == r.pid && c.start_ns == r.start_ns)
                .flat_map(|c| c.regions.iter().rev().find(|s| s.id == r.id))
                .map(|s| s.begin_ns)
                .next()
                .unwrap_or(0)
        })
        .min()
        .unwrap_or(0)
}

/// The answer file of a region: what the Python side polls for.
pub fn answer_path(dir: &Path, pid: u32, id: u64) -> PathBuf {
    dir.join(format!("region-{pid}-{id}.json"))
}

fn answer(
    rec: &Recording,
    request: &RegionRequest,
    dir: &Path,
    options: &pipeline::Options,
) -> Result<()> {
    let Some((ci, span)) = rec.channels.iter().enumerate().find_map(|(ci, c)| {
        if c.pid != request.pid || c.start_ns != request.start_ns {
            return None;
        }
        c.regions
            .iter()
            .rev()
            .find(|s| s.id == request.id)
            .map(|s| (ci, s))
    }) else {
        return Err(Error::new("region not in the recording"));
    };
    let path = answer_path(dir, request.pid, request.id);
    let mut answer = Answer {
        region: model::regions::summary(
            rec,
            ci,
            span,
            &crate::symbolize::classes(rec),
            options.filter,
        ),
        lines: None,
        page: None,
    };
    if request.page {
        // A notebook cell's report: its lines and its own page, native functions named.
        let natives = crate::symbolize::native_names(rec);
        let index = model::regions::Index::new(rec);
        let profile = pipeline::region(&index, ci, span, &natives, options);
        let page = path.with_extension("html");
        let html = crate::render::html::render(&profile)?;
        write_renamed(dir, &page, html.as_bytes())?;
        answer.page = Some(page.display().to_string());
        answer.lines = Some(heaviest_lines(profile.lines));
    }
    let json = serde_json::to_vec(&answer).map_err(|e| Error::new(e.to_string()))?;
    write_renamed(dir, &path, &json)
}

/// Lines sent with a page request: the heaviest half by time, the heaviest half by memory.
const MAX_LINES: usize = 40;

/// The lines that took the most time and those that allocated or held the most, in file and
/// line order.
fn heaviest_lines(lines: Vec<model::LineStats>) -> Vec<model::LineStats> {
    let time = |l: &model::LineStats| {
        let m = &l.measures;
        m.time_s()
    };
    let bytes = |l: &model::LineStats| l.measures.alloc_bytes.max(l.measures.peak_bytes);
    let mut by_time: Vec<usize> = (0..lines.len())
        .filter(|&i| time(&lines[i]) > 0.0)
        .collect();
    by_time.sort_by(|&a, &b| time(&lines[b]).total_cmp(&time(&lines[a])));
    let mut by_bytes: Vec<usize> = (0..lines.len()).filter(|&i| bytes(&lines[i]) > 0).collect();
    by_bytes.sort_by_key(|&i| std::cmp::Reverse(bytes(&lines[i])));
    let mut keep: Vec<usize> = by_time.into_iter().take(MAX_LINES / 2).collect();
    for i in by_bytes {
        if keep.len() >= MAX_LINES {
            break;
        }
        if !keep.contains(&i) {
            keep.push(i);
        }
    }
    keep.sort_by(|&a, &b| (&lines[a].file, lines[a].line).cmp(&(&lines[b].file, lines[b].line)));
    keep.into_iter().map(|i| lines[i].clone()).collect()
}

/// What the collector answers: the region's summary (as in the profile's `regions`), and for a
/// page request its lines and the path of its page.
#[derive(serde::Serialize)]
struct Answer {
    #[serde(flatten)]
    region: model::regions::Region,
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<Vec<model::LineStats>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    page: Option<String>,
}

/// Write `path` (0600) under a temporary name in `dir`, then rename it: a reader never sees
/// half, and whatever was at `path` (a file, a symbolic link someone planted) is replaced, never
/// written through.
fn write_renamed(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = write_private(&temp, bytes).and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map_err(|e| Error::new(format!("{}: {e}", path.display())))
}

/// A new file at `path`, 0600, with `bytes`: one left there (by a run that died) is removed
/// first; the file is created exclusively, so a link planted at the name fails the write
/// rather than being followed.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    file.write_all(bytes)
}

/// One HTML page per region of the recording in `dir` (created if missing), named after the
/// region (`tests_test_x.py__test_big.html`; a number is added when two names clash), each
/// written as the region answers are: 0600, renamed into place, never through a link.
/// Returns the number of pages written.
pub fn write_pages(
    rec: &Recording,
    natives: &NativeNames,
    options: &pipeline::Options,
    dir: &Path,
) -> Result<usize> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::new(format!("--regions-html {}: {e}", dir.display())))?;
    let mut used = std::collections::BTreeSet::new();
    let mut written = 0;
    // Made once for every page: each page's cut finds its events by binary search.
    let index = model::regions::Index::new(rec);
    for (ci, channel) in rec.channels.iter().enumerate() {
        for span in &channel.regions {
            let profile = pipeline::region(&index, ci, span, natives, options);
            let html = crate::render::html::render(&profile)?;
            let stem = file_stem(&span.name);
            let mut name = format!("{stem}.html");
            let mut n = 2;
            while !used.insert(name.clone()) {
                name = format!("{stem}-{n}.html");
                n += 1;
            }
            write_renamed(dir, &dir.join(&name), html.as_bytes())?;
            written += 1;
        }
    }
    Ok(written)
}

/// A file name for a region's page: letters, digits, `.`, `-` and `_` kept, the rest `_`, at
/// most 120 characters, never empty or hidden.
pub fn file_stem(name: &str) -> String {
    let mut stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, 'r');
    }
    stem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_names_are_plain_file_names() {
        assert_eq!(
            file_stem("tests/test_x.py::test_big[a/b]"),
            "tests_test_x.py__test_big_a_b_"
        );
        assert_eq!(file_stem(""), "r");
        assert_eq!(file_stem("../etc"), "r.._etc");
        assert_eq!(file_stem(&"x".repeat(500)).len(), 120);
    }

    #[test]
    fn pages_are_private_and_replace_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mlprof-regions-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim.txt");
        std::fs::write(&victim, "keep").unwrap();
        let page = dir.join("plain.html");
        std::os::unix::fs::symlink(&victim, &page).unwrap();
        // A link at the temporary name too: removed, not followed.
        let temp = dir.join(format!(".plain.html.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        write_renamed(&dir, &page, b"<html>").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let meta = std::fs::symlink_metadata(&page).unwrap();
        assert!(meta.is_file(), "the link was replaced");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&page).unwrap(), b"<html>");
        write_renamed(&dir, &page, b"again").unwrap();
        assert_eq!(std::fs::read(&page).unwrap(), b"again");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["plain.html", "victim.txt"],
            "no temporary file left"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
