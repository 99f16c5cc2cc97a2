//! Scale: a large saved profile is read with memory in proportion to what it holds, an
//! implausibly large file is refused in one line, and a program that marks 100,000 regions gets
//! every one reported or counted as dropped.

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

/// 100,000 regions, one after the other (a large pytest session, one region per test): each is
/// in the profile, or counted in the warning that says its records were dropped because the
/// channel was full, and none is called malformed. The program stops the collector (its
/// parent, `mlprof run`) while it marks the first half, so that the ring fills and drops
/// region records for certain.
#[test]
fn a_hundred_thousand_regions_are_each_reported_or_counted_as_dropped() {
    const N: usize = 100_000;
    let dir = fixture::tempdir();
    let program = dir.join("regions.py");
    std::fs::write(
        &program,
        format!(
            "import os, signal, time\nimport mlprof\n\
             collector = os.getppid()\n\
             with open('/proc/%d/comm' % collector) as f:\n    assert 'mlprof' in f.read()\n\
             os.kill(collector, signal.SIGSTOP)\n\
             try:\n    for i in range({half}):\n        with mlprof.mark('test_%d' % i):\n            pass\n\
             finally:\n    os.kill(collector, signal.SIGCONT)\n\
             for i in range({half}, {last}):\n    with mlprof.mark('test_%d' % i):\n        pass\n\
             time.sleep(0.2)\n\
             with mlprof.mark('last'):\n    pass\n",
            half = N / 2,
            last = N - 1,
        ),
    )
    .unwrap();
    let python = fixture::pythons().last().unwrap();
    let pythonpath = fixture::root().join("python");
    let run = fixture::profile_with_env(
        &[python.exe.as_os_str(), program.as_os_str()],
        &[("PYTHONPATH", pythonpath.to_str().unwrap())],
    );
    assert!(
        run.output.status.success(),
        "{}",
        String::from_utf8_lossy(&run.output.stderr)
    );
    let p = &run.profile;
    let warnings = p.warnings.join("\n");
    assert!(!warnings.contains("malformed"), "{warnings}");
    assert!(!warnings.contains("left out"), "{warnings}");
    let dropped: usize = p
        .warnings
        .iter()
        .filter_map(|w| {
            let (_, rest) = w.split_once("): ")?;
            let (n, rest) = rest.split_once(' ')?;
            rest.contains("records were dropped because the channel was full")
                .then(|| n.parse::<usize>().ok())?
        })
        .sum();
    assert!(p.dropped_events > 0 && dropped > 0, "{warnings}");
    assert_eq!(p.regions.len() + dropped, N, "{warnings}");
    assert!(p.regions.iter().any(|r| r.name == "last" && r.ended));
    eprintln!("{} regions reported, {dropped} dropped", p.regions.len());
    let _ = std::fs::remove_dir_all(&dir);
}
