//! Any terminal width (issue 34, item 1): the text documents of a real run, at 60, 80, 100, 160
//! and 240 columns, never exceed the width (in terminal cells), keep each line's number, its
//! leading figures and the start of its source, and keep hints whole (wrapped); the width comes
//! from `--width`, else `COLUMNS`, else the terminal, else 100 for a pipe or a file.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use mlprof::model::Profile;
use unicode_width::UnicodeWidthStr;

use crate::cpu::markers;
use crate::fixture::{self, os};

const WIDTHS: [usize; 5] = [60, 80, 100, 160, 240];
/// The script's lines the tables must show, by marker.
const MARKED: [&str; 3] = ["helper", "copies", "big"];
/// Keeps BLAS's work on the thread that asked for it (and the run short).
const ENV: [(&str, &str); 1] = [("OPENBLAS_NUM_THREADS", "1")];

/// `wide_report.py SCALE` profiled: the profile, and where it is saved.
fn profiled(scale: &str) -> (Profile, PathBuf) {
    let py = fixture::numpy_pythons().last().unwrap();
    let run = fixture::profile_script(py, "wide_report.py", &[scale], &ENV);
    let path = fixture::tempdir().join(format!("wide-{scale}.json"));
    std::fs::write(&path, mlprof::render::json::render(&run.profile).unwrap()).unwrap();
    (run.profile, path)
}

fn mlprof(args: &[&OsStr], env: &[(&str, &str)]) -> Output {
    let out = fixture::mlprof()
        .args(args)
        .env_remove("COLUMNS")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `mlprof report PROFILE ARGS...`'s stdout.
fn report(path: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut all = vec![os("report"), path.as_os_str()];
    all.extend(args.iter().map(os));
    String::from_utf8(mlprof(&all, env).stdout).unwrap()
}

/// Every line of `text` within `width` cells.
fn fits(text: &str, width: usize, what: &str) {
    for line in text.lines() {
        assert!(
            line.width() <= width,
            "{what}: {} cells, over {width}: {line:?}\n{text}",
            line.width()
        );
    }
}

/// The table row of `line` (the first whose first word is its number) and its words.
fn row(text: &str, line: u32) -> &str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(&line.to_string()))
        .unwrap_or_else(|| panic!("no row for line {line}:\n{text}"))
}

/// Whitespace-separated words, one space apart: prose compared wherever its lines broke.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The script's marked lines: number and source text.
fn marked() -> Vec<(u32, String)> {
    let m = markers("wide_report.py");
    let source = std::fs::read_to_string(fixture::script("wide_report.py")).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    MARKED
        .iter()
        .map(|name| (m[*name], lines[m[*name] as usize - 1].trim().to_string()))
        .collect()
}

/// Whether the line tables of `report` have a kernel column.
fn kernel_column(report: &str) -> bool {
    report
        .lines()
        .any(|l| l.trim_start().starts_with("line Python native kernel "))
}

/// The report at each width: nothing wider, every marked line with its number, the same
/// leading figures as without a limit and its source's start, every hint's words in order,
/// the native functions under a line and each table's header.
#[test]
fn the_report_fits_every_width_with_line_numbers_source_and_whole_hints() {
    let (p, path) = profiled("1");
    assert!(p.hints.len() >= 2, "{:#?}", p.hints);
    let free = report(&path, &["--width", "0"], &[]);
    assert!(
        free.lines().any(|l| l.width() > 240),
        "without a limit the hints are one line each:\n{free}"
    );
    for width in WIDTHS {
        let text = report(&path, &["--width", &width.to_string()], &[]);
        let what = format!("--width {width}");
        fits(&text, width, &what);
        for (line, source) in marked() {
            let at = row(&text, line);
            // Line number, Python, native and waiting shares and time, as without a limit
            // (the kernel's share, the last leading figure, where it fits).
            let lead: Vec<&str> = at.split_whitespace().take(6).collect();
            let mut full: Vec<&str> = row(&free, line).split_whitespace().collect();
            if kernel_column(&free) && !kernel_column(&text) {
                full.remove(3);
            }
            full.truncate(6);
            assert_eq!(lead, full, "{what}: figures of line {line}");
            // The start of the source: its first dozen characters at least.
            let start: String = source.chars().take(12).collect();
            assert!(at.contains(&start), "{what}: line {line}: {at:?}");
        }
        let flat = words(&text);
        for h in &p.hints {
            for part in [&h.evidence, &h.suggestion, &h.saving] {
                assert!(
                    flat.contains(&words(part)),
                    "{what}: hint text {part:?} cut:\n{text}"
                );
            }
            let source = h.source.as_deref().unwrap();
            assert!(flat.contains(&words(source)), "{what}: {source:?}:\n{text}");
        }
        for header in ["line", "time", "source", "CPU by function", "Processes (2)"] {
            assert!(text.contains(header), "{what}: no {header:?}:\n{text}");
        }
        assert!(text.contains("wide_report.py"), "{what}: the file named");
        // A native function under the helper's line: its share under the native column.
        let helper = marked()[0].0.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.split_whitespace().next() == Some(helper.as_str()))
            .unwrap();
        let below = lines[at + 1];
        assert!(
            below.trim_start().starts_with(|c: char| c.is_ascii_digit()) && below.contains('%'),
            "{what}: a native row under line {helper}: {below:?}"
        );
    }
    // Wide enough for every column: the figures the narrow layouts leave out come back.
    let wide = report(&path, &["--width", "240"], &[]);
    for header in ["allocated", "held", "copied", "footprint", "leak"] {
        assert!(wide.contains(header), "{header}:\n{wide}");
    }
}

/// `--width` first, then `COLUMNS`, then 100 for a pipe or a file; on `run` as on `report`.
#[test]
fn width_comes_from_the_flag_then_columns_then_100_when_piped() {
    let (_, path) = profiled("1");
    let piped = report(&path, &[], &[]);
    fits(&piped, 100, "piped");
    assert!(
        piped.lines().any(|l| l.width() > 80),
        "a pipe gets 100 columns, not 80:\n{piped}"
    );
    let columns = report(&path, &[], &[("COLUMNS", "70")]);
    fits(&columns, 70, "COLUMNS=70");
    assert!(columns.lines().any(|l| l.width() > 60), "{columns}");
    let flag = report(&path, &["--width", "60"], &[("COLUMNS", "200")]);
    assert_eq!(
        flag,
        report(&path, &["--width", "60"], &[]),
        "the flag wins"
    );
    for bad in ["COLUMNS", "0", "-3"] {
        assert_eq!(
            report(&path, &[], &[("COLUMNS", bad)]),
            piped,
            "COLUMNS={bad} is no width"
        );
    }
    // A file gets a pipe's width.
    let file = path.with_extension("txt");
    report(&path, &["-o", file.to_str().unwrap()], &[]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), piped);
    // A width below 40 is refused by name.
    let refused = fixture::mlprof()
        .args(["report", "--width", "20"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("0 (no limit) or 40 columns"));

    // `run`'s report on stderr, with the flag (over COLUMNS) and with COLUMNS alone.
    let py = fixture::numpy_pythons().last().unwrap();
    let script = fixture::script("wide_report.py");
    for (flags, columns, width) in [(&["--width", "66"][..], "200", 66), (&[][..], "72", 72)] {
        let mut args = vec![os("run")];
        args.extend(flags.iter().map(os));
        args.extend([os("--"), os(&py.exe), os(&script), os("1")]);
        let out = mlprof(&args, &[ENV[0], ("COLUMNS", columns)]);
        let text = String::from_utf8(out.stderr).unwrap();
        fits(&text, width, &format!("run {flags:?} COLUMNS={columns}"));
        for (line, source) in marked() {
            let start: String = source.chars().take(12).collect();
            assert!(row(&text, line).contains(&start), "{text}");
        }
    }
}

/// On a terminal (a pseudo-terminal 90 columns wide, no `COLUMNS`): its width, and colour.
#[test]
fn a_terminal_gives_its_own_width_and_colour() {
    let (_, path) = profiled("1");
    let (text, coloured) = on_terminal(&[os("report"), path.as_os_str()], 90);
    assert!(coloured, "colour on a terminal:\n{text}");
    fits(&text, 90, "a 90-column terminal");
    assert!(text.lines().any(|l| l.width() > 80), "{text}");
    for (line, _) in marked() {
        row(&text, line);
    }
}

/// `mlprof ARGS` with its stdout on a new pseudo-terminal `cols` wide: what it showed, colour
/// codes and carriage returns taken out, and whether there were colour codes.
fn on_terminal(args: &[&OsStr], cols: u16) -> (String, bool) {
    let size = libc::winsize {
        ws_row: 50,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes the two descriptors; no name is asked for, no settings given.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened, and are owned here alone.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = fixture::mlprof()
        .args(args)
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::from(slave))
        .spawn()
        .unwrap();
    // The command (and with it our copy of the terminal's other end) is gone: reading ends
    // (EIO) once mlprof has exited and all it wrote is read.
    let reader = std::thread::spawn(move || {
        let mut terminal = std::fs::File::from(master);
        let (mut all, mut chunk) = (Vec::new(), [0u8; 4096]);
        while let Ok(n @ 1..) = terminal.read(&mut chunk) {
            all.extend_from_slice(&chunk[..n]);
        }
        all
    });
    assert!(child.wait().unwrap().success());
    let raw = String::from_utf8(reader.join().unwrap()).unwrap();
    let coloured = raw.contains("\x1b[1m");
    let mut plain = raw.replace('\r', "");
    for code in ["\x1b[0m", "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[33m"] {
        plain = plain.replace(code, "");
    }
    (plain, coloured)
}

/// `mlprof diff` at each width: nothing wider, the changed line named whole.
#[test]
fn diff_fits_every_width() {
    let (_, base) = profiled("1");
    let (_, new) = profiled("3");
    let copies = markers("wide_report.py")["copies"];
    for width in WIDTHS {
        let out = mlprof(
            &[
                os("diff"),
                os(&base),
                os(&new),
                os("--width"),
                os(&width.to_string()),
            ],
            &[],
        );
        let text = String::from_utf8(out.stdout).unwrap();
        fits(&text, width, &format!("diff --width {width}"));
        assert!(
            text.contains(&format!("wide_report.py:{copies}")),
            "{width}: the copying line grew:\n{text}"
        );
    }
}
