//! Scale: a large saved profile is read with memory in proportion to what it holds, and an
//! implausibly large file is refused in one line.

use std::ffi::OsStr;
use std::io::Write as _;
use std::process::Stdio;

use mlprof::model::regions::{Region, RegionLine};
use mlprof::model::{LineStats, Profile, SCHEMA};

use super::fixture;

/// A valid profile of about `lines` lines and as many regions: some 1.4 KB of text each.
fn big_profile(lines: usize) -> Profile {
    let file = |i: usize| format!("/work/project/package/module_{:05}.py", i / 50);
    Profile {
        schema: SCHEMA.into(),
        command: vec!["python3".into(), "train.py".into()],
        lines: (0..lines)
            .map(|i| LineStats {
                file: file(i),
                line: (i % 50) as u32 + 1,
                function: format!("function_{}", i / 10),
                source: "    total = sum(x * x for x in values)".into(),
                footprint_bytes: vec![0; 20],
                ..LineStats::default()
            })
            .collect(),
        regions: (0..lines)
            .map(|i| Region {
                name: format!("tests/test_module.py::test_case[{i}]"),
                pid: 1000,
                start_s: i as f64 * 1e-3,
                duration_s: 1e-3,
                ended: true,
                held_at_peak: vec![RegionLine {
                    file: file(i),
                    line: 3,
                    function: "test_case".into(),
                    bytes: 4096,
                }],
                ..Region::default()
            })
            .collect(),
        ..Profile::default()
    }
}

/// Run `mlprof ARGS` with its output thrown away: its exit code, stderr and peak resident set
/// size in bytes. Measured by a Python parent (`RUSAGE_CHILDREN`), not this test's own
/// `wait4`: a child forked from this process counts its pages until it executes mlprof.
fn peak_rss(args: &[&OsStr]) -> (Option<i32>, String, u64) {
    const MEASURE: &str = "import resource, subprocess, sys\n\
        r = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)\n\
        print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n";
    let python = &fixture::pythons()[0];
    let out = std::process::Command::new(&python.exe)
        .args(["-c", MEASURE])
        .arg(env!("CARGO_BIN_EXE_mlprof"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut words = stdout.split_whitespace();
    let code: i32 = words.next().and_then(|w| w.parse().ok()).expect(&stderr);
    let kib: u64 = words.next().and_then(|w| w.parse().ok()).expect(&stderr);
    ((code >= 0).then_some(code), stderr, kib * 1024)
}

/// `mlprof report` on a 60 MB profile peaks below 3 times the file's size (it used to read the
/// text whole, then build a `serde_json::Value` of it, then the model: some 7 to 8 times the
/// file; now about 1 time), and a file larger than any profile is refused in one line.
#[test]
fn a_large_profile_is_read_with_memory_in_proportion_and_a_huge_file_is_refused() {
    let dir = fixture::tempdir();
    let path = dir.join("big.json");
    let text = mlprof::render::json::render(&big_profile(40_000)).unwrap();
    std::fs::write(&path, &text).unwrap();
    let size = text.len() as u64;
    drop(text);
    assert!(size > 50 << 20, "{size} bytes");
    let (code, stderr, rss) = peak_rss(&[fixture::os("report"), path.as_os_str()]);
    assert_eq!(code, Some(0), "{stderr}");
    eprintln!("mlprof report: {size}-byte profile, {rss} bytes resident at the peak");
    assert!(
        rss <= 3 * size,
        "mlprof report on a {size}-byte profile peaked at {rss} bytes resident (more than 3 \
         times the file)"
    );

    // Larger than any profile (a sparse file: nothing is written): one line, non-zero exit.
    let huge = dir.join("huge.json");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(mlprof::render::json::MAX_PROFILE_BYTES + 1)
        .unwrap();
    (&file).write_all(b"{").unwrap();
    drop(file);
    let (code, stderr, rss) = peak_rss(&[fixture::os("report"), huge.as_os_str()]);
    assert_eq!(code, Some(mlprof::error::EXIT_ERROR), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("larger than any profile"), "{stderr}");
    assert!(rss < 64 << 20, "{rss} bytes resident to refuse it");
    let _ = std::fs::remove_dir_all(&dir);
}
