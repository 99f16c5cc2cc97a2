//! Fault suite: programs that damage their own channel (scribbled bytes, impossible positions
//! and counts, truncation), leave stray `*.ring` files beside it, or name a FIFO or `/dev/zero`
//! as a code object's file. The program must behave exactly as without mlprof, mlprof must end
//! within seconds of it, and a report must be written that says what was lost.

use std::ffi::OsStr;
use std::process::Command;

use mlprof_wire::Header;

use super::{assert_same, os, plain, profiled, script, LIMIT};
use crate::fixture::{self, Python};

/// The channel header offsets the scripts need to damage it precisely.
fn layout() -> String {
    format!(
        "header={},slots={},head={},tail={}",
        std::mem::size_of::<Header>(),
        std::mem::offset_of!(Header, slots),
        std::mem::offset_of!(Header, head),
        std::mem::offset_of!(Header, tail),
    )
}

/// Run `name ARGS` under `py` with and without mlprof; the program must behave the same and
/// mlprof must write a report within [`LIMIT`]. Returns the profile's warnings.
fn check(py: &Python, options: &[&str], name: &str, extra: &[&str]) -> Vec<String> {
    let path = script(name);
    let mut args: Vec<&OsStr> = vec![os(&py.exe), os(&path)];
    args.extend(extra.iter().map(os));
    let layout = layout();
    let env = [("MLPROF_TEST_LAYOUT", layout.as_str())];
    let expected = plain(&args, &env);
    let run = profiled(options, &args, &env);
    let what = format!("{} {name} {extra:?}", py.minor);
    assert_same(&expected, &run.output, &args);
    assert!(run.elapsed < LIMIT, "{what}: mlprof took {:?}", run.elapsed);
    assert!(
        run.profile.is_some(),
        "{what}: no report written; mlprof said: {}",
        run.stderr()
    );
    let profile = run.profile();
    assert!(
        profile.processes.iter().any(|p| p.python.is_some()),
        "{what}: the Python process is in the report: {:?}",
        profile.processes
    );
    profile.warnings
}

/// Every interpreter with two seeds of its own (`first`, `first + 1`, ...): ten seeds over
/// five Pythons.
fn seeded(first: u32) -> Vec<(&'static Python, String)> {
    let mut out = Vec::new();
    for (i, py) in fixture::pythons().iter().enumerate() {
        for k in 0..2 {
            out.push((py, (first + 2 * i as u32 + k).to_string()));
        }
    }
    out
}

fn assert_warned(warnings: &[String], what: &str, needles: &[&str]) {
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("pid ") && needles.iter().any(|n| w.contains(n))),
        "{what}: a warning naming the channel and what was lost ({needles:?}): {warnings:#?}"
    );
}

#[test]
fn random_bytes_over_the_whole_channel() {
    for (py, seed) in seeded(1) {
        let warnings = check(py, &[], "channel_scribble.py", &["random", &seed]);
        assert_warned(&warnings, &py.minor, &["header became invalid"]);
    }
}

#[test]
fn random_bytes_over_the_ring() {
    // Scribbled slots that were already read, or not yet written, lose nothing; one that was
    // waiting to be read is skipped at the end. Either way the run is reported.
    for (py, seed) in seeded(100) {
        check(py, &[], "channel_scribble.py", &["ring", &seed]);
    }
}

#[test]
fn a_huge_head_position_is_not_drained_for_ever() {
    for py in fixture::spread(fixture::pythons()) {
        let warnings = check(py, &[], "channel_scribble.py", &["head", "1"]);
        assert_warned(&warnings, &py.minor, &["ring positions are corrupt"]);
    }
}

#[test]
fn a_huge_slot_count_is_refused() {
    for py in fixture::spread(fixture::pythons()) {
        let warnings = check(py, &[], "channel_scribble.py", &["slots", "1"]);
        assert_warned(&warnings, &py.minor, &["header became invalid"]);
    }
}

#[test]
fn records_claiming_huge_depths_and_lengths_are_dropped() {
    // The program's own allocation hooks must not write into the ring while it publishes its
    // forged records (its sampler is blocked meanwhile).
    for py in fixture::spread(fixture::pythons()) {
        let warnings = check(py, &FEW_RECORDS, "channel_scribble.py", &["deep", "1"]);
        assert_warned(&warnings, &py.minor, &["2 malformed records dropped"]);
    }
}

/// No allocation or copy sampling: the ring then stays in the first half of its file, which
/// a program that truncates its own channel needs (its own writes past the end would be a
/// SIGBUS in the program, whatever the collector does).
const FEW_RECORDS: [&str; 4] = ["--memory-sample-bytes", "0", "--copy-sample-bytes", "0"];

#[test]
fn a_channel_truncated_to_zero_and_back() {
    for py in fixture::spread(fixture::pythons()) {
        let warnings = check(py, &FEW_RECORDS, "channel_truncate.py", &["zero"]);
        assert_warned(
            &warnings,
            &py.minor,
            &["truncated", "header became invalid"],
        );
    }
}

#[test]
fn a_channel_truncated_to_half() {
    for py in fixture::spread(fixture::pythons()) {
        let warnings = check(py, &FEW_RECORDS, "channel_truncate.py", &["half"]);
        assert_warned(&warnings, &py.minor, &["truncated"]);
    }
}

#[test]
fn stray_ring_files_are_skipped_with_warnings() {
    for py in fixture::spread(fixture::pythons()) {
        let warnings = check(py, &[], "channel_stray.py", &[]);
        for name in ["garbage.ring", "x.ring", "short.ring", "dir.ring"] {
            assert!(
                warnings.iter().any(|w| w.contains(name)),
                "{}: a warning names {name}: {warnings:#?}",
                py.minor
            );
        }
    }
}

#[test]
fn code_objects_named_after_a_fifo_or_dev_zero_are_not_read() {
    for py in fixture::spread(fixture::pythons()) {
        let dir = fixture::tempdir();
        let fifo = dir.join("pipe.py");
        let fifo = fifo.to_str().unwrap();
        let path = script("channel_sources.py");
        let args = [os(&py.exe), os(&path), os(fifo)];
        let expected = plain(&args, &[]);
        let run = profiled(&[], &args, &[]);
        assert_same(&expected, &run.output, &args);
        assert!(run.elapsed < LIMIT, "{}: {:?}", py.minor, run.elapsed);
        let profile = run.profile();
        for file in ["/dev/zero", fifo] {
            let lines: Vec<_> = profile.lines.iter().filter(|l| l.file == file).collect();
            assert!(
                !lines.is_empty(),
                "{}: the hot lines of {file} are reported: {:?}",
                py.minor,
                profile.lines
            );
            assert!(lines.iter().all(|l| l.source.is_empty()), "{}", py.minor);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The scripts really find and damage their channel: without mlprof they do nothing, so this
/// checks the precondition of the tests above (a channel is there to damage).
#[test]
fn the_scripts_find_their_own_channel() {
    let py = &fixture::pythons()[0];
    let probe = "import sys; sys.path.insert(0, sys.argv[1]); import channel_lib; \
                 print(channel_lib.own_channel() is not None)";
    let dir = script("");
    let run = profiled(&[], &[os(&py.exe), os("-c"), os(probe), os(&dir)], &[]);
    assert_eq!(String::from_utf8_lossy(&run.output.stdout), "True\n");
    let out = Command::new(&py.exe)
        .args([os("-c"), os(probe), os(&dir)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "False\n");
}
