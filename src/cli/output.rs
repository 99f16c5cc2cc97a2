//! Where reports go and how they are written: `-o` destinations (placeholders, the format
//! from the extension), the terminal, report files written atomically where they can be (temp
//! file beside the target, fsync, rename; devices, FIFOs and links directly), and the CI outputs
//! of the budget verdicts (JUnit, GitHub annotations and job summary).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::RunArgs;
use crate::error::{Error, Result};
use crate::model;
use crate::render::{self, Format};

/// Where a report goes.
pub(super) enum Destination {
    File(PathBuf),
    Stdout,
    Stderr,
    Nowhere,
}

pub(super) fn run_destination(args: &RunArgs) -> Result<(Format, Destination)> {
    destination(&args.output, args.format.chosen(), args.quiet)
}

/// Where a report of `run` or `attach` goes: the `-o` file (format from the flag, else its
/// extension), nowhere with `-q`, stdout for a chosen format, else the terminal report on
/// stderr.
pub(super) fn destination(
    output: &Option<PathBuf>,
    chosen: Option<Format>,
    quiet: bool,
) -> Result<(Format, Destination)> {
    Ok(match (output, chosen) {
        (Some(path), format) => {
            let path = placeholders(path)?;
            (
                format.unwrap_or_else(|| format_for(&path)),
                Destination::File(path),
            )
        }
        (None, _) if quiet => (Format::Text, Destination::Nowhere),
        (None, Some(format)) => (format, Destination::Stdout),
        (None, None) => (Format::Text, Destination::Stderr),
    })
}

/// `-o` with `{host}`, `{rank}` and `{pid}` replaced, so that each node or rank of a job
/// writes its own file: the host name, the rank from the environment (`norank` without one),
/// mlprof's process id.
pub(super) fn placeholders(path: &Path) -> Result<PathBuf> {
    let Some(text) = path.to_str().filter(|t| t.contains('{')) else {
        return Ok(path.to_path_buf());
    };
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| placeholder_error(text))?;
        let value = match &after[..close] {
            "host" => host_name(),
            "rank" => crate::launch::env_rank().map_or_else(|| "norank".to_string(), |r| r.0),
            "pid" => std::process::id().to_string(),
            _ => return Err(placeholder_error(text)),
        };
        out.push_str(&placeholder_value(&value));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(PathBuf::from(out))
}

/// A placeholder's value as it goes into a path. It comes from the environment (a rank
/// variable) or the host name, so it names part of one file name and nothing else: `/` and
/// control characters (and bidirectional controls) become `_`, and so do dots at its start
/// and end, so that it forms no `.` or `..` component whatever the template puts beside it
/// (`RANK=..` with `-o runs/{rank}/p.json` must not write into the directory above `runs`).
pub(super) fn placeholder_value(value: &str) -> String {
    let mut out: Vec<char> = value
        .chars()
        .map(|c| {
            if c == '/' || crate::sanitize::unsafe_char(c) {
                '_'
            } else {
                c
            }
        })
        .collect();
    let mut i = 0;
    while out.get(i) == Some(&'.') {
        out[i] = '_';
        i += 1;
    }
    let mut j = out.len();
    while j > 0 && out[j - 1] == '.' {
        out[j - 1] = '_';
        j -= 1;
    }
    if out.is_empty() {
        return "_".to_string();
    }
    out.into_iter().collect()
}

pub(super) fn placeholder_error(text: &str) -> Error {
    Error::with_code(
        format!("-o {text}: placeholders are {{host}}, {{rank}} and {{pid}}"),
        crate::error::EXIT_USAGE,
    )
}

/// This machine's host name (`unknown-host` if it cannot be read), safe in a file name.
pub(super) fn host_name() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into our buffer.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let host = String::from_utf8_lossy(&name[..len]).into_owned();
    if ok && !host.is_empty() {
        host
    } else {
        "unknown-host".to_string()
    }
}

pub(super) fn format_for(path: &Path) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => Format::Html,
        Some("txt") => Format::Text,
        _ => Format::Json,
    }
}

/// Where a document made from saved files (`merge`, `diff`, `sweep`) goes: `-o FILE` (format
/// from the flag, else the extension), else stdout (format from the flag, else text).
pub(super) fn document_output(
    output: Option<PathBuf>,
    chosen: Option<Format>,
) -> (Format, Destination) {
    match output {
        Some(path) => (
            chosen.unwrap_or_else(|| format_for(&path)),
            Destination::File(path),
        ),
        None => (chosen.unwrap_or(Format::Text), Destination::Stdout),
    }
}

pub(super) fn emit(
    profile: &model::Profile,
    format: Format,
    destination: Destination,
    width: Option<usize>,
) -> Result<()> {
    if matches!(destination, Destination::Nowhere) {
        return Ok(());
    }
    let style = super::terminal::style_for(&destination, width);
    let text = render::render_for(profile, format, style)?;
    write_text(&text, destination)
}

pub(super) fn write_text(text: &str, destination: Destination) -> Result<()> {
    write_bytes(text.as_bytes(), destination)
}

pub(super) fn write_bytes(text: &[u8], destination: Destination) -> Result<()> {
    match &destination {
        Destination::File(path) => write_file(path, text),
        Destination::Stdout => write_all(std::io::stdout().lock(), text),
        Destination::Stderr => write_all(std::io::stderr().lock(), text),
        Destination::Nowhere => Ok(()),
    }
}

pub(super) fn write_all(mut out: impl Write, text: &[u8]) -> Result<()> {
    match out.write_all(text).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::new(format!("cannot write the report: {e}"))),
    }
}

/// How a report file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FileWrite {
    /// Into a private temporary file beside it (0600 until complete), synced, then renamed
    /// over it: a reader never sees half a report, and a failed write leaves what was there.
    Atomic,
    /// Opened and written in place: a device (`/dev/stdout`, `/dev/full`), a FIFO, a path
    /// through a symbolic link, or a writable file in a directory we may not add files to.
    Direct,
}

/// Whether and how a report can be written at `path`: its directory exists and we may write
/// there (or the file itself is writable). Checked before the program runs, and again when
/// writing.
pub(super) fn file_write(path: &Path) -> Result<FileWrite> {
    let cannot = |why: &str| Error::new(format!("cannot write {}: {why}", path.display()));
    if path.file_name().is_none() {
        return Err(cannot("not a file name"));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(cannot("Is a directory")),
        // A link someone else made (planted while the program ran, in a shared directory):
        // never followed, whatever the kernel's `fs.protected_symlinks` says.
        Ok(meta) if meta.file_type().is_symlink() && !ours_or_roots(&meta) => {
            use std::os::unix::fs::MetadataExt;
            Err(cannot(&format!(
                "it is a symbolic link another user made (uid {}): not followed",
                meta.uid()
            )))
        }
        Ok(meta) => {
            let through = std::fs::metadata(path).map_err(|e| cannot(&io_reason(&e)))?;
            if through.is_dir() {
                Err(cannot("Is a directory"))
            } else if !may_access(path, libc::W_OK) {
                Err(cannot("Permission denied"))
            } else if meta.is_file() && may_access(dir, libc::W_OK | libc::X_OK) {
                Ok(FileWrite::Atomic)
            } else {
                Ok(FileWrite::Direct)
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => {
                Err(cannot(&format!("{} is not a directory", dir.display())))
            }
            Ok(_) if may_access(dir, libc::W_OK | libc::X_OK) => Ok(FileWrite::Atomic),
            Ok(_) => Err(cannot(&format!(
                "Permission denied (directory {})",
                dir.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(cannot(&format!(
                "directory {} does not exist",
                dir.display()
            ))),
            Err(e) => Err(cannot(&io_reason(&e))),
        },
        Err(e) => Err(cannot(&io_reason(&e))),
    }
}

/// Whether `meta` (of a link) belongs to us or to root (`/dev/stdout` is root's).
fn ours_or_roots(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    meta.uid() == uid || meta.uid() == 0
}

/// `access(2)`: whether we may use `path` as `mode` says.
pub(super) fn may_access(path: &Path, mode: libc::c_int) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path; access only inspects it.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

/// Write a report file: atomically where it can be ([`FileWrite`]).
pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let written = match file_write(path)? {
        FileWrite::Atomic => write_atomic(path, bytes),
        FileWrite::Direct => write_direct(path, bytes),
    };
    written.map_err(|e| {
        Error::new(format!(
            "cannot write {}: {}",
            path.display(),
            io_reason(&e)
        ))
    })
}

pub(super) fn write_direct(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.flush()?;
    if file.metadata()?.is_file() {
        file.sync_all()?;
    }
    Ok(())
}

pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default();
    let pid = std::process::id();
    let temp = if name.len() <= 200 {
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(".mlprof-{pid}.tmp"));
        dir.join(temp)
    } else {
        dir.join(format!(".mlprof-{pid}.tmp"))
    };
    // What the file had, or 0600 for a new one: a profile holds the program's command line,
    // paths and names, which are the user's alone.
    let mode = match std::fs::metadata(path) {
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(_) => 0o600,
    };
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
        return written;
    }
    // The rename lasts once the directory is synced (best effort: not every file system can).
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

pub(super) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "No such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "Permission denied".to_string(),
        _ => e.to_string(),
    }
}

/// CI outputs of the budget verdicts, when budgets were set: GitHub Actions annotations and job
/// summary (when `GITHUB_ACTIONS=true`; annotations on stdout unless the report is there), and
/// JUnit XML when asked.
pub(super) fn ci_outputs(
    p: &model::Profile,
    junit: Option<&Path>,
    report_on_stdout: bool,
    budgets_set: bool,
) -> Result<()> {
    if let Some(path) = junit {
        write_file(path, crate::gate::report::junit(p).as_bytes())?;
    }
    if !budgets_set || std::env::var("GITHUB_ACTIONS").as_deref() != Ok("true") {
        return Ok(());
    }
    let annotations = crate::gate::report::github_annotations(&p.violations);
    // Written as `say` writes: a closed or full stream must not abort mlprof.
    let _ = if report_on_stdout {
        std::io::stderr().lock().write_all(annotations.as_bytes())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(annotations.as_bytes())
            .and_then(|_| out.flush())
    };
    if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY") {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&summary)
            .map_err(|e| Error::new(format!("cannot write the job summary: {}", io_reason(&e))))?;
        let _ = file.write_all(crate::gate::report::markdown_summary(p).as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's rule for `-o FILE` without a format flag.
    #[test]
    fn report_format_follows_the_extension() {
        for (path, want) in [
            ("r.html", Format::Html),
            ("out/r.htm", Format::Html),
            ("r.txt", Format::Text),
            ("r.json", Format::Json),
            ("prof-{rank}", Format::Json),
            ("r.html.gz", Format::Json),
        ] {
            assert_eq!(format_for(Path::new(path)), want, "{path}");
        }
    }

    #[test]
    fn placeholder_values_name_no_directory_and_hold_no_control_character() {
        for (value, want) in [
            ("3", "3"),
            ("node1.cluster", "node1.cluster"),
            ("..", "__"),
            (".", "_"),
            ("...", "___"),
            (".hidden.", "_hidden_"),
            ("../../etc", "___.._etc"),
            ("a/b", "a_b"),
            ("/", "_"),
            ("", "_"),
            ("\x1b[2J\x07\n\r\0", "_[2J____"),
            ("r\u{202e}0", "r_0"),
        ] {
            assert_eq!(placeholder_value(value), want, "{value:?}");
        }
    }

    #[test]
    fn report_files_are_checked_and_written_atomically_where_they_can_be() {
        let dir = std::env::temp_dir().join(format!("mlprof-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.json");
        assert_eq!(file_write(&file).unwrap(), FileWrite::Atomic);
        assert_eq!(
            file_write(Path::new("/dev/full")).unwrap(),
            FileWrite::Direct
        );
        assert_eq!(
            file_write(Path::new("/dev/stdout")).unwrap(),
            FileWrite::Direct
        );
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(file_write(&link).is_err(), "a dangling link");
        write_file(&file, b"one").unwrap();
        assert_eq!(file_write(&link).unwrap(), FileWrite::Direct);
        write_file(&link, b"two").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        for bad in [dir.clone(), dir.join("missing/p.json"), file.join("x")] {
            let err = file_write(&bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("cannot write {}: ", bad.display())),
                "{err}"
            );
        }
        let err = write_file(Path::new("/dev/full"), b"x").unwrap_err();
        assert!(err.to_string().contains("No space left on device"), "{err}");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["link.json", "p.json"], "no temporary file left");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
