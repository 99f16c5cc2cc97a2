//! How a test that cannot run here says so (the unit tests, and the end-to-end tests through
//! `fixture::skipped`): `skipped: …` on stderr and a line in the file `MLPROF_TEST_SKIPS` names
//! (`scripts/test.sh` counts those as skipped); with `MLPROF_REQUIRE_ALL=1`, a failure.

use std::io::Write;

/// Say why the calling test does not run here (and return from it), or fail it when every test
/// must run (`MLPROF_REQUIRE_ALL=1`).
pub fn skipped(message: &str) {
    let required = std::env::var_os("MLPROF_REQUIRE_ALL").is_some_and(|v| v == "1");
    skipped_unless_required(message, required);
}

fn skipped_unless_required(message: &str, required: bool) {
    if required {
        panic!("{message} (MLPROF_REQUIRE_ALL=1: a skip is a failure)");
    }
    eprintln!("{message}");
    if let Some(path) = std::env::var_os("MLPROF_TEST_SKIPS") {
        let test = std::thread::current().name().unwrap_or("?").to_string();
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let why = message.trim_start_matches("skipped: ").replace('\n', " ");
            let _ = writeln!(file, "{test}: {why}");
        }
    }
}

#[test]
#[should_panic(
    expected = "skipped: no frobnicator here (MLPROF_REQUIRE_ALL=1: a skip is a failure)"
)]
fn a_required_skip_fails_its_test() {
    skipped_unless_required("skipped: no frobnicator here", true);
}
