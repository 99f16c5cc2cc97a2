//! Opening a file a process maps, to read its symbols, as untrusted input: the path in
//! `/proc/PID/maps` names whatever is at that path now, which whoever can write there may
//! have replaced (with a FIFO, whose `open` blocks forever; with a sparse file of gigabytes,
//! which a whole-file read would hold in memory; with another ELF file, whose symbols would
//! be wrong).
//!
//! So a mapped file is read through the mapping's own inode where the kernel lets us:
//! `/proc/PID/map_files/START-END` (opening it needs `CAP_SYS_ADMIN` or
//! `CAP_CHECKPOINT_RESTORE`, e.g. root), else `/proc/PID/exe` for the main binary, else
//! `/proc/PID/root/PATH` (the path as the process sees it), else the path as this process
//! sees it. Each is opened non-blocking, without following a final symbolic link (but for
//! the `/proc` links, which are the kernel's own), never before `stat` has said it is a
//! regular file, and then checked again on the open descriptor: a regular file, no larger
//! than a cap, and the inode the mapping names (`maps` lists device and inode). Device
//! numbers are compared except where either is an anonymous device (major 0): overlayfs and
//! btrfs show `maps` and `stat` different device numbers for one file, so there the inode
//! number alone tells. Reads are then bounded ([`Bounded`]): never the whole file.

use std::cell::Cell;
use std::fs::{File, Metadata, OpenOptions};
use std::ops::Range;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use object::read::{ReadCache, ReadRef};

use crate::recording::maps::MappedFile;

/// Largest file read as the interpreter (`python3.X`, `libpython3.X.so`: tens of MB; with
/// debug information a few hundred).
pub const MAX_INTERPRETER_BYTES: u64 = 1 << 30;
/// Largest library read for native symbols (`libtorch_cuda.so`, `libtensorflow_cc.so` are
/// over 500 MB): only its headers and symbol tables are read, within [`MAX_READ_BYTES`].
pub const MAX_LIBRARY_BYTES: u64 = 4 << 30;
/// Most bytes read from one file (headers, symbol and string tables, unwind index).
pub const MAX_READ_BYTES: u64 = 512 << 20;

/// A mapped file, opened and checked.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    pub meta: Metadata,
}

/// Open the file `map` maps, in process `pid` (when it still runs) or at its path: a regular
/// file of at most `cap` bytes, the inode the mapping names. The error says why not, in a
/// few words, for the last way tried that found something at all (the path, where it did).
pub fn open_mapped(pid: Option<u32>, map: &MappedFile, cap: u64) -> Result<Opened, String> {
    let path = map.path.strip_suffix(" (deleted)").unwrap_or(&map.path);
    if !path.starts_with('/') {
        return Err("not a file".to_string());
    }
    let mut why = None;
    // (Path, a link of the kernel's, whether a refusal there says nothing of the mapping.)
    let mut tries: Vec<(String, bool, bool)> = Vec::new();
    if let Some(pid) = pid {
        tries.push((
            format!("/proc/{pid}/map_files/{:x}-{:x}", map.start, map.end),
            true,
            false,
        ));
        // The main binary, tried for any mapping: only where the mapping names its inode,
        // which tells.
        if map.inode != 0 {
            tries.push((format!("/proc/{pid}/exe"), true, true));
        }
        tries.push((format!("/proc/{pid}/root{path}"), false, false));
    }
    tries.push((path.to_string(), false, false));
    for (candidate, kernel_link, quiet) in &tries {
        match open_checked(candidate, *kernel_link, map, cap) {
            Ok(opened) => return Ok(opened),
            Err(Some(reason)) if !quiet => why = Some(reason),
            Err(_) => {}
        }
    }
    Err(why.unwrap_or_else(|| "no such file".to_string()))
}

/// Open one candidate; `Err(None)` when there is nothing there (or no permission to look),
/// `Err(Some(why))` when what is there is refused.
fn open_checked(
    path: &str,
    kernel_link: bool,
    map: &MappedFile,
    cap: u64,
) -> Result<Opened, Option<String>> {
    // Look before opening: a FIFO or device node is never opened.
    let before = match kernel_link {
        true => std::fs::metadata(path),
        false => std::fs::symlink_metadata(path),
    }
    .map_err(|_| None)?;
    check(&before, map, cap)?;
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if !kernel_link {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|_| None)?;
    // And again on what was opened: the path may have changed in between.
    let meta = file.metadata().map_err(|_| None)?;
    check(&meta, map, cap)?;
    Ok(Opened { file, meta })
}

fn check(meta: &Metadata, map: &MappedFile, cap: u64) -> Result<(), Option<String>> {
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(Some(format!("not a regular file ({what})")));
    }
    if meta.len() > cap {
        return Err(Some(format!(
            "{} bytes, more than the {} MiB read",
            meta.len(),
            cap >> 20
        )));
    }
    if !same_inode(meta, map) {
        return Err(Some("not the file mapped (replaced since?)".to_string()));
    }
    Ok(())
}

/// Whether `meta` is the file the mapping names (a mapping whose inode is not known, 0,
/// matches anything).
pub fn same_inode(meta: &Metadata, map: &MappedFile) -> bool {
    if map.inode == 0 {
        return true;
    }
    let anonymous = |dev: u64| major(dev) == 0;
    meta.ino() == map.inode
        && (meta.dev() == map.dev || anonymous(meta.dev()) || anonymous(map.dev))
}

/// `dev_t` as glibc encodes it, from the major and minor numbers `/proc/PID/maps` prints.
pub fn makedev(major: u64, minor: u64) -> u64 {
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

fn major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)
}

/// A checked file read in bounded pieces (through `object`'s cache of the pieces read): at
/// most [`MAX_READ_BYTES`] in all, never past its end.
#[derive(Debug)]
pub struct Bounded {
    cache: ReadCache<File>,
    left: Cell<u64>,
}

impl Bounded {
    pub fn new(file: File) -> Bounded {
        Bounded {
            cache: ReadCache::new(file),
            left: Cell::new(MAX_READ_BYTES),
        }
    }

    fn charge(&self, bytes: u64) -> Result<(), ()> {
        let left = self.left.get().checked_sub(bytes).ok_or(())?;
        self.left.set(left);
        Ok(())
    }
}

impl<'a> ReadRef<'a> for &'a Bounded {
    fn len(self) -> Result<u64, ()> {
        (&self.cache).len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        if size > self.left.get() {
            return Err(());
        }
        let bytes = (&self.cache).read_bytes_at(offset, size)?;
        self.charge(size)?;
        Ok(bytes)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        // `ReadCache` reads at most 4 KiB looking for the delimiter.
        self.charge(4096.min(range.end.saturating_sub(range.start)))?;
        (&self.cache).read_bytes_at_until(range, delimiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(path: &str, meta: &Metadata) -> MappedFile {
        MappedFile {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            path: path.to_string(),
            executable: true,
            dev: meta.dev(),
            inode: meta.ino(),
        }
    }

    #[test]
    fn a_fifo_a_large_file_and_a_replaced_file_are_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("mlprof-mapped-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("lib.so");
        std::fs::write(&lib, b"\x7fELF").unwrap();
        let path = lib.to_str().unwrap();
        let map = mapping(path, &std::fs::metadata(&lib).unwrap());
        assert!(open_mapped(None, &map, 1 << 20).is_ok());
        assert!(open_mapped(None, &map, 2)
            .unwrap_err()
            .contains("more than"));
        // Replaced by another file: not the inode mapped (which the mapping holds, as `_held`
        // does here: a freed inode's number may be given to the new file).
        let _held = File::open(&lib).unwrap();
        std::fs::remove_file(&lib).unwrap();
        std::fs::write(&lib, b"\x7fELF").unwrap();
        let err = open_mapped(None, &map, 1 << 20).unwrap_err();
        assert!(err.contains("not the file mapped"), "{err}");
        // Replaced by a FIFO: no writer ever comes, and the open does not wait for one.
        std::fs::remove_file(&lib).unwrap();
        let c = std::ffi::CString::new(path).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let deleted = MappedFile {
            path: format!("{path} (deleted)"),
            ..map.clone()
        };
        let err = open_mapped(None, &deleted, 1 << 20).unwrap_err();
        assert!(err.contains("FIFO"), "{err}");
        // A symbolic link at the path is not followed.
        std::fs::remove_file(&lib).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &lib).unwrap();
        let err = open_mapped(None, &map, 1 << 20).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_library_with_nothing_at_its_path_is_not_called_replaced() {
        let me = std::process::id();
        let exe = std::fs::metadata("/proc/self/exe").unwrap();
        let gone = MappedFile {
            start: 1,
            end: 2,
            inode: exe.ino() + 1,
            ..mapping("/nonexistent/libgone.so (deleted)", &exe)
        };
        assert_eq!(
            open_mapped(Some(me), &gone, 1 << 30).unwrap_err(),
            "no such file"
        );
    }

    #[test]
    fn device_numbers_round_trip() {
        let meta = std::fs::metadata("/proc/self/exe").unwrap();
        let dev = meta.dev();
        let (ma, mi) = (libc::major(dev), libc::minor(dev));
        assert_eq!(makedev(ma.into(), mi.into()), dev);
        assert_eq!(major(dev), u64::from(ma));
    }

    #[test]
    fn reads_are_bounded() {
        let file = File::open("/proc/self/exe").unwrap();
        let bounded = Bounded::new(file);
        let len = (&bounded).len().unwrap();
        assert!((&bounded).read_bytes_at(0, 4).is_ok());
        assert!((&bounded).read_bytes_at(len, 1).is_err());
        bounded.left.set(3);
        assert!((&bounded).read_bytes_at(0, 4).is_err());
    }
}
