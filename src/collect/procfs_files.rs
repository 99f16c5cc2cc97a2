//! The small `/proc` files the collector reads at every tick (`statm`, `stat`, `status`,
//! `schedstat`), kept open and read again from offset 0.
//!
//! Opening a `/proc/PID/...` file walks its path (a pid lookup and new dentries) and, through
//! `std::fs::read_to_string`, adds a `statx` for a size hint and a `close`: three of the four
//! system calls of a reading, and most of its cost. A file of a running process that is kept
//! open reads the current values at each `pread` from 0 (the kernel regenerates a `seq_file`
//! at offset 0), so a reading is one system call. A kept file also stays with the process it
//! was opened for: once that process is gone (and its pid possibly reused) a read fails, the
//! file is closed and the next reading opens the path afresh.
//!
//! At most [`MAX_OPEN`] files are kept (the collector must leave the descriptors of a program
//! with thousands of threads to spare); past that, the oldest half are closed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Files kept open at most.
pub const MAX_OPEN: usize = 256;
/// The largest file read whole: the files kept are under 2 KiB (`status` of a process with
/// many groups or a wide CPU mask can pass it; longer ones are read in full through the
/// growing buffer, at the cost of one more read).
const FIRST_READ: usize = 4096;

/// Kept files by path, with the order they were opened in (for closing the oldest).
#[derive(Default)]
struct Kept {
    files: HashMap<String, (u64, File)>,
    opened: u64,
}

thread_local! {
    static KEPT: RefCell<Kept> = RefCell::new(Kept::default());
}

/// The text of the small `/proc` file at `path`, read from a kept-open file when there is one.
/// `None` when it cannot be read (the process or thread is gone).
pub fn read(path: &str) -> Option<String> {
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        if let Some((_, file)) = kept.files.get(path) {
            match read_all(file) {
                Some(text) => return Some(text),
                None => {
                    kept.files.remove(path); // gone, or its pid given to another process
                }
            }
        }
        let file = File::open(path).ok()?;
        let text = read_all(&file)?;
        if kept.files.len() >= MAX_OPEN {
            close_oldest_half(&mut kept);
        }
        let order = kept.opened;
        kept.opened += 1;
        kept.files.insert(path.to_owned(), (order, file));
        Some(text)
    })
}

/// The text of the small `/proc` file at `path`, opened for this reading only (files read
/// too rarely, or too many of them, to be kept): without `read_to_string`'s `statx`.
pub fn read_once(path: &str) -> Option<String> {
    read_all(&File::open(path).ok()?)
}

/// Close every kept file of `pid` (a process that has exited).
pub fn forget(pid: u32) {
    let prefix = format!("/proc/{pid}/");
    KEPT.with(|kept| {
        kept.borrow_mut()
            .files
            .retain(|path, _| !path.starts_with(&prefix))
    });
}

/// Close the kept files of `pid`'s threads (`/proc/PID/task/TID/...`) but those of `live`.
pub fn forget_threads(pid: u32, live: &[u32]) {
    let prefix = format!("/proc/{pid}/task/");
    KEPT.with(|kept| {
        kept.borrow_mut().files.retain(|path, _| {
            let Some(rest) = path.strip_prefix(&prefix) else {
                return true;
            };
            let tid = rest.split('/').next().and_then(|t| t.parse::<u32>().ok());
            tid.is_some_and(|tid| live.contains(&tid))
        })
    });
}

/// How many files are kept open now (tests).
#[cfg(test)]
fn kept_count() -> usize {
    KEPT.with(|kept| kept.borrow().files.len())
}

fn close_oldest_half(kept: &mut Kept) {
    let mut orders: Vec<u64> = kept.files.values().map(|(o, _)| *o).collect();
    orders.sort_unstable();
    let cut = orders[orders.len() / 2];
    kept.files.retain(|_, (o, _)| *o >= cut);
}

/// The whole file, read from offset 0; `None` on an error or an empty read (a process gone
/// reads as an error or as nothing).
fn read_all(file: &File) -> Option<String> {
    let mut buf = vec![0u8; FIRST_READ];
    let mut len = 0;
    loop {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    // A short read is the whole file: these files are one `seq_file` record,
                    // generated whole and handed out in full when it fits (an EOF read would
                    // double the system calls).
                    break;
                }
                buf.resize(buf.len() * 2, 0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    if len == 0 {
        return None;
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_file_reads_the_current_values() {
        let path = format!("/proc/{}/stat", std::process::id());
        let first = read(&path).unwrap();
        let burn = std::time::Instant::now();
        while burn.elapsed() < std::time::Duration::from_millis(60) {
            std::hint::black_box(0u64.wrapping_add(1));
        }
        let again = read(&path).unwrap();
        let utime = |s: &str| -> u64 {
            let rest = &s[s.rfind(')').unwrap() + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
        };
        assert!(utime(&again) > utime(&first), "{first}\n{again}");
        assert!(kept_count() >= 1);
    }

    #[test]
    fn a_file_of_a_process_gone_is_closed_and_read_afresh() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let path = format!("/proc/{}/statm", child.id());
        assert!(read(&path).is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            read(&path),
            None,
            "a reaped process's kept file no longer reads"
        );
        forget(child.id());
        assert!(KEPT.with(|k| !k.borrow().files.contains_key(&path)));
    }

    #[test]
    fn the_files_of_threads_no_longer_listed_are_closed() {
        let me = std::process::id();
        let tid = own_tid();
        let mine = format!("/proc/{me}/task/{tid}/schedstat");
        let other = format!("/proc/{me}/task/{}/schedstat", tid + 1_000_000);
        let statm = format!("/proc/{me}/statm");
        assert!(read(&mine).is_some() && read(&statm).is_some());
        KEPT.with(|k| {
            let file = File::open(&statm).unwrap();
            k.borrow_mut().files.insert(other.clone(), (u64::MAX, file));
        });
        forget_threads(me, &[tid]);
        KEPT.with(|k| {
            let k = k.borrow();
            assert!(k.files.contains_key(&mine) && k.files.contains_key(&statm));
            assert!(
                !k.files.contains_key(&other),
                "an ended thread's file is closed"
            );
        });
    }

    /// This thread's kernel id, from `/proc/thread-self`.
    fn own_tid() -> u32 {
        let link = std::fs::read_link("/proc/thread-self").unwrap();
        let tid = link.file_name().unwrap().to_str().unwrap();
        tid.parse().unwrap()
    }

    #[test]
    fn no_more_than_the_cap_is_kept() {
        // Readable small files under /proc/sys: more than the cap of them on any kernel.
        let mut dirs = vec![std::path::PathBuf::from("/proc/sys")];
        let mut read_ok = 0;
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match entry.file_type() {
                    Ok(t) if t.is_dir() => dirs.push(path),
                    Ok(t) if t.is_file() => {
                        read_ok += usize::from(read(&path.to_string_lossy()).is_some());
                        assert!(kept_count() <= MAX_OPEN);
                    }
                    _ => {}
                }
            }
            if read_ok > MAX_OPEN + 16 {
                break;
            }
        }
        assert!(read_ok > MAX_OPEN, "only {read_ok} files read");
        assert!(kept_count() > MAX_OPEN / 4, "the newest are kept");
    }
}
