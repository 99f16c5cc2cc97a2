//! What `/proc` says about a process: resident set size, its high-water mark, CPU time, and
//! the files it has mapped.

use super::procfs_files as files;
use crate::recording::maps::MappedFile;

/// Close the files kept open for reading `pid` (a process that has exited).
pub fn forget(pid: u32) {
    files::forget(pid);
}

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcReading {
    /// Resident set size now (bytes).
    pub rss_bytes: u64,
    /// The part of it not backed by files or shared memory (`statm`'s resident less shared):
    /// the heap, anonymous mappings, stacks.
    pub anon_bytes: u64,
    /// Kernel's peak RSS (VmHWM) so far (bytes).
    pub hwm_bytes: u64,
    /// User + kernel CPU seconds so far, when read.
    pub cpu_s: Option<f64>,
}

/// Read `/proc/PID`; `None` if the process is gone (or a zombie with no memory). The kernel's
/// RSS high-water mark (`VmHWM`, from the costlier `status` file) only `with_hwm`; otherwise
/// `hwm_bytes` is the current RSS. The CPU time (`stat`, whose cost grows with the process's
/// threads: 0.15 ms for 257 of them) only `with_cpu`.
pub fn read(pid: u32, with_hwm: bool, with_cpu: bool) -> Option<ProcReading> {
    let statm = files::read(&format!("/proc/{pid}/statm"))?;
    let mut fields = statm.split_whitespace().skip(1);
    let pages: u64 = fields.next()?.parse().ok()?;
    let shared: u64 = fields.next().and_then(|f| f.parse().ok()).unwrap_or(pages);
    let rss_bytes = pages * page_size();
    let anon_bytes = pages.saturating_sub(shared) * page_size();
    if rss_bytes == 0 {
        return None; // a zombie: no memory left to measure
    }
    let hwm_bytes = match with_hwm {
        true => files::read(&format!("/proc/{pid}/status"))
            .and_then(|s| status_field_kib(&s, "VmHWM:"))
            .map_or(rss_bytes, |kib| (kib * 1024).max(rss_bytes)),
        false => rss_bytes,
    };
    let cpu_s = match with_cpu {
        true => Some(stat_cpu_s(&files::read(&format!("/proc/{pid}/stat"))?).unwrap_or(0.0)),
        false => None,
    };
    Some(ProcReading {
        rss_bytes,
        anon_bytes,
        hwm_bytes,
        cpu_s,
    })
}

/// The share of `pid`'s resident pages that are its own: its proportional set size (`Pss`:
/// each shared page divided among the processes that map it) over its `Rss`, both of
/// `/proc/PID/smaps_rollup` (one walk of its pages: costly). `None` where the kernel has no
/// such file or the process is gone.
pub fn own_share(pid: u32) -> Option<f64> {
    let text = files::read_once(&format!("/proc/{pid}/smaps_rollup"))?;
    let rss = status_field_kib(&text, "Rss:")?;
    let pss = status_field_kib(&text, "Pss:")?;
    (rss > 0).then(|| (pss as f64 / rss as f64).min(1.0))
}

/// The CPU time thread `tid` of `pid` has used, in ns: the first field of
/// `/proc/PID/task/TID/schedstat` (the scheduler's own clock of the thread). `None` if gone.
pub fn thread_cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    let text = files::read(&format!("/proc/{pid}/task/{tid}/schedstat"))?;
    text.split_whitespace().next()?.parse().ok()
}

/// Whether `pid` exists and is not a zombie (state `Z`) or dead (`X`).
pub fn alive(pid: u32) -> bool {
    let Some(stat) = files::read(&format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain anything.
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, None | Some("Z" | "X" | "x"))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

fn status_field_kib(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// utime + stime from `/proc/PID/stat` (fields 14 and 15, after the parenthesised name).
fn stat_cpu_s(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so utime (14) is index 11 and stime (15) index 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / clock_ticks_per_s())
}

/// User and kernel CPU seconds of `pid` and of the children it has waited for, as `wait4`
/// will report them when it is reaped (`utime + cutime`, `stime + cstime` of
/// `/proc/PID/stat`): the usage of a command that is still running.
pub fn usage(pid: u32) -> Option<(f64, f64)> {
    let stat = files::read(&format!("/proc/{pid}/stat"))?;
    stat_usage(&stat)
}

fn stat_usage(stat: &str) -> Option<(f64, f64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 to 17 (utime, stime, cutime, cstime) are indexes 11 to 14 of `rest`.
    let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let ticks = clock_ticks_per_s();
    let user = field(11)?.saturating_add(field(13)?);
    let kernel = field(12)?.saturating_add(field(14)?);
    Some((user as f64 / ticks, kernel as f64 / ticks))
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// Parses `/proc/PID/maps` text. Keeps file-backed mappings (path starting with `/`, which may
/// contain spaces) and `[vdso]`; drops anonymous, `[heap]`, `[stack]` and garbage lines.
pub fn parse_maps(text: &str) -> Vec<MappedFile> {
    text.lines().filter_map(parse_maps_line).collect()
}

/// Reads and parses `/proc/PID/maps` (non-UTF-8 path bytes are replaced, not an error).
pub fn read_maps(pid: u32) -> std::io::Result<Vec<MappedFile>> {
    let bytes = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(parse_maps(&String::from_utf8_lossy(&bytes)))
}

fn parse_maps_line(line: &str) -> Option<MappedFile> {
    let (range, rest) = split_field(line)?;
    let (perms, rest) = split_field(rest)?;
    let (offset, rest) = split_field(rest)?;
    let (dev, rest) = split_field(rest)?;
    let (inode, rest) = split_field(rest)?;
    let path = rest.trim_start();
    if !path.starts_with('/') && path != "[vdso]" {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if end <= start {
        return None;
    }
    Some(MappedFile {
        start,
        end,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: path.to_owned(),
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        dev: dev
            .split_once(':')
            .and_then(|(major, minor)| {
                let major = u64::from_str_radix(major, 16).ok()?;
                let minor = u64::from_str_radix(minor, 16).ok()?;
                Some(crate::recording::mapped::makedev(major, minor))
            })
            .unwrap_or(0),
        inode: inode.parse().unwrap_or(0),
    })
}

/// The next whitespace-delimited field and what follows it (untrimmed).
fn split_field(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some(s.split_at(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_opens_its_own_mappings() {
        use crate::recording::mapped;
        let maps = read_maps(std::process::id()).unwrap();
        let exe = maps
            .iter()
            .find(|m| m.offset == 0 && m.path.starts_with('/'));
        let exe = exe.expect("a mapped file");
        let opened =
            mapped::open_mapped(Some(std::process::id()), exe, mapped::MAX_LIBRARY_BYTES).unwrap();
        assert!(mapped::same_inode(&opened.meta, exe));
    }

    #[test]
    fn parses_stat_with_spaces_and_parens_in_the_name() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        let cpu = stat_cpu_s(stat).unwrap();
        assert!((cpu - 300.0 / clock_ticks_per_s()).abs() < 1e-9);
    }

    #[test]
    fn usage_adds_the_waited_childrens_time() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0";
        let (user, kernel) = stat_usage(stat).unwrap();
        assert!((user - 257.0 / clock_ticks_per_s()).abs() < 1e-9);
        assert!((kernel - 53.0 / clock_ticks_per_s()).abs() < 1e-9);
        assert!(usage(std::process::id()).is_some());
    }

    #[test]
    fn reads_this_process() {
        let me = read(std::process::id(), true, true).unwrap();
        assert!(me.rss_bytes > 0 && me.hwm_bytes >= me.rss_bytes);
        assert!(me.cpu_s.is_some_and(|c| c > 0.0));
        assert_eq!(read(std::process::id(), false, false).unwrap().cpu_s, None);
        let share = own_share(std::process::id()).expect("smaps_rollup (Linux 4.14+)");
        assert!(share > 0.0 && share <= 1.0, "share of own pages {share}");
    }
}
