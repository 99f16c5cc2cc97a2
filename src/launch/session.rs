//! The private directory of one run (0700) holding every process's channel file (0600),
//! removed when the run ends; and the preload library, extracted once per build into a lasting
//! private directory of the user under a name made of its contents, so that a descendant that
//! outlives the run and execs a program later still finds what its `LD_PRELOAD` names, and
//! nobody else can put anything there (see docs/design/process-trees.md). A lasting directory
//! that is not ours alone is refused.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The preload library, built by `build.rs` and embedded in the binary.
static PRELOAD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libmlprof_preload.so"));

/// A run's private directory; deleted on drop.
pub struct Session {
    dir: PathBuf,
    preload: PathBuf,
}

impl Session {
    /// Create the directory in the first safe temporary directory with room for it (see
    /// [`candidates`]) and put the preload library there or in the lasting directory.
    /// `MLPROF_PRELOAD` names another library to use instead (development builds).
    pub fn create() -> Result<Session> {
        let mut refused = Vec::new();
        for parent in candidates(&mut refused) {
            match Session::create_in(&parent) {
                Ok(session) => return Ok(session),
                // Someone else's directory where ours should be: said, not worked around.
                Err(e) if e.to_string().contains(SQUATTED) => return Err(e),
                Err(e) => refused.push(e.to_string()),
            }
        }
        Err(Error::new(format!(
            "no usable temporary directory for the profile's channels ({}); set TMPDIR to a \
             private directory with a few MiB free",
            refused.join("; ")
        )))
    }

    fn create_in(parent: &Path) -> Result<Session> {
        let preload = match std::env::var_os("MLPROF_PRELOAD") {
            Some(path) => PathBuf::from(path),
            None => {
                // Where the library lasts: refused (never replaced by the run's
                // own directory, which is gone after the run while descendants may still name
                // it) when someone else holds it.
                let lasting = lasting_dir(parent)?;
                lasting_file(&lasting, "libmlprof_preload", ".so", PRELOAD)?
            }
        };
        Ok(Session {
            dir: make_private_dir(parent)?,
            preload,
        })
    }

    /// The directory holding the channel files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The preload library to put in `LD_PRELOAD`.
    pub fn preload_path(&self) -> &Path {
        &self.preload
    }
}

impl Drop for Session {
    /// The directory is renamed first, then removed: a process still starting (a fork child
    /// making its channel, which names the directory by its path) then finds no directory
    /// instead of adding a file to one being removed, which would keep it from going.
    fn drop(&mut self) {
        let mut gone = self.dir.clone().into_os_string();
        gone.push(".gone");
        let target = match std::fs::rename(&self.dir, &gone) {
            Ok(()) => PathBuf::from(gone),
            Err(_) => self.dir.clone(),
        };
        for _ in 0..8 {
            if std::fs::remove_dir_all(&target).is_ok() || !target.exists() {
                break;
            }
        }
    }
}

/// Where a run's directory may go, in order: `$TMPDIR`, `/tmp`, `/dev/shm`, `$XDG_RUNTIME_DIR`.
/// Only directories whose entries nobody else can replace ([`safe_parent`]): the preload
/// library and the channels live there, and a directory another user could swap would let
/// them run code as the profiled user. Those left out are explained in `refused`.
fn candidates(refused: &mut Vec<String>) -> Vec<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut all: Vec<PathBuf> = Vec::new();
    all.push(std::env::temp_dir());
    for fixed in ["/tmp", "/dev/shm"] {
        all.push(PathBuf::from(fixed));
    }
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        all.push(PathBuf::from(runtime));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in all {
        if out.contains(&dir) {
            continue;
        }
        if safe_parent(&dir, uid) {
            out.push(dir);
        } else if dir.exists() {
            refused.push(format!(
                "{} is writable by other users without the sticky bit, or not ours",
                dir.display()
            ));
        }
    }
    out
}

/// What the error of a lasting directory someone else holds says.
const SQUATTED: &str = "is not mlprof's private directory";

/// The user's lasting directory (`PARENT/mlprof-UID` where only the user or root can replace
/// entries of `PARENT`, as in a sticky `/tmp`; else `$XDG_RUNTIME_DIR/mlprof`), created if
/// missing: ours, a directory, not a link, writable by nobody else, 0711 (others may go through
/// it to the library, which is readable, but not list it): a descendant that changes user
/// (`su`, `setpriv`) still loads the library its `LD_PRELOAD` names, which then sees the run is
/// not its user's and takes itself out, rather than the loader printing an error into every
/// program that user runs. `PARENT` comes first: `$XDG_RUNTIME_DIR` is removed at logout, while
/// a `nohup` job outlives it, and is never open to another user. One that someone else made
/// first (or opened to others' writes) is refused with a one-line error naming it.
fn lasting_dir(parent: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    // `$XDG_RUNTIME_DIR` only when it is this user's own private directory (under `sudo -E` it
    // is another user's).
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .filter(|d| {
            std::fs::symlink_metadata(d)
                .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
        });
    let dir = match runtime {
        _ if safe_parent(parent, uid) => parent.join(format!("mlprof-{uid}")),
        Some(runtime) => runtime.join("mlprof"),
        None => {
            return Err(Error::new(format!(
                "{} lets other users replace its entries",
                parent.display()
            )))
        }
    };
    let _ = std::fs::DirBuilder::new().mode(0o711).create(&dir);
    let meta = std::fs::symlink_metadata(&dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(Error::new(format!(
            "{} {SQUATTED} (a link or a file is there): remove it, or set TMPDIR to a private \
             directory",
            dir.display()
        )));
    }
    if meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(Error::new(format!(
            "{} {SQUATTED} (owner uid {}, mode {:o}): another user may have made it; remove \
             it, or set TMPDIR to a private directory",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    if meta.mode() & 0o7777 != 0o711 {
        // Ours (an older mlprof made it 0700): as above, and never readable by others.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| Error::new(format!("cannot set the mode of {}: {e}", dir.display())))?;
    }
    Ok(dir)
}

/// `PREFIX-HASH.SUFFIX` in `dir`, holding `bytes` (named by their hash), written there if
/// missing or different.
fn lasting_file(dir: &Path, prefix: &str, suffix: &str, bytes: &[u8]) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(format!("{prefix}-{:016x}{suffix}", fnv1a(bytes)));
    if std::fs::read(&path).is_ok_and(|have| have == bytes) {
        // An older mlprof wrote it 0600; the directory is ours alone to write, so is the file.
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
        return Ok(path);
    }
    // Written under a fresh temporary name and renamed: a concurrent run never sees half a
    // file, and two runs never share a temporary file.
    let partial = dir.join(partial_name());
    // 0644: the library is code anyone may read (it is in the wheel); only its user may write.
    if let Err(e) = write_file(&partial, bytes, 0o644) {
        let _ = std::fs::remove_file(&partial); // no room: leave no partial file behind
        return Err(e);
    }
    std::fs::rename(&partial, &path)
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// A name for something being made, this process's and this moment's alone.
fn partial_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(".partial-{}-{nanos}", std::process::id())
}

/// Whether only `uid` (or root) can replace entries of `dir`: owned by one of them, and not
/// writable by others unless sticky (like `/tmp`).
fn safe_parent(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return false;
    };
    let owner_ok = meta.uid() == uid || meta.uid() == 0;
    let shared = meta.mode() & 0o022 != 0;
    let sticky = meta.mode() & 0o1000 != 0;
    meta.is_dir() && owner_ok && (!shared || sticky)
}

/// FNV-1a, 64 bits: names the library by its contents.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn make_private_dir(parent: &Path) -> Result<PathBuf> {
    let template = parent.join("mlprof-XXXXXX");
    let mut bytes = CString::new(template.as_os_str().as_bytes())
        .map_err(|_| Error::new("temporary directory path contains a NUL byte"))?
        .into_bytes_with_nul();
    // SAFETY: `bytes` is a writable NUL-terminated template ending in XXXXXX, as mkdtemp
    // requires; mkdtemp creates the directory with mode 0700 and fills in the name in place.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        let err = std::io::Error::last_os_error();
        return Err(Error::new(format!(
            "cannot create a private directory in {}: {err}",
            parent.display()
        )));
    }
    bytes.pop();
    let path: std::ffi::OsString = std::os::unix::ffi::OsStringExt::from_vec(bytes);
    Ok(PathBuf::from(path))
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let fail = |e: std::io::Error| Error::new(format!("cannot write {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(fail)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(fail(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn session_dir_is_private_the_library_closed_to_writes_and_the_run_removed() {
        let session = Session::create().unwrap();
        let dir = session.dir().to_path_buf();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let lib_path = session.preload_path().to_path_buf();
        let lib = std::fs::metadata(&lib_path).unwrap();
        // Readable (a descendant that changes user loads it), writable by its user alone, in a
        // directory others may go through but neither list nor write.
        assert_eq!(lib.permissions().mode() & 0o777, 0o644);
        assert!(lib.len() > 1000);
        let lib_dir = std::fs::metadata(lib_path.parent().unwrap()).unwrap();
        assert_eq!(lib_dir.permissions().mode() & 0o777, 0o711);
        drop(session);
        assert!(!dir.exists());
        assert!(lib_path.exists(), "the library outlives the run");
        let again = Session::create().unwrap();
        assert_eq!(again.preload_path(), lib_path, "and is reused");
    }
}
