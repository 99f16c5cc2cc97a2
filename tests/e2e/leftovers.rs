//! Nothing a run names outlives it where someone else could take it over (issue 46): the path
//! a descendant's `LD_PRELOAD` names still exists after the run, in the user's own private
//! directory, and no `PYTHONPATH` is set at all; a lasting directory someone else made or opened is refused, named;
//! a report is never written through a link another user planted while the program ran.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::fixture::{self, os};

fn uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// `mlprof run` with `TMPDIR` set to `tmp` and no `XDG_RUNTIME_DIR` (so the lasting directory
/// is `tmp/mlprof-UID`).
fn run_in(tmp: &Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    fixture::mlprof()
        .arg("run")
        .args(args)
        .env("TMPDIR", tmp)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("MLPROF_PRELOAD")
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .output()
        .expect("run mlprof")
}

/// A private directory of the test's to be `TMPDIR`.
fn private_tmp() -> PathBuf {
    let dir = fixture::tempdir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn private_and_ours(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.uid() == uid() && m.mode() & 0o077 == 0 && !m.file_type().is_symlink())
}

/// A job that outlives the run keeps `LD_PRELOAD`: what it names must still be there after the
/// run (the run's own directory, whose name anyone could make again, is gone), in directories
/// only the user can write. mlprof sets no `PYTHONPATH`: the program sees the one it was given.
#[test]
fn what_descendants_name_outlives_the_run_in_the_users_private_directory() {
    let py = &fixture::pythons()[0];
    let tmp = private_tmp();
    let out = tmp.join("env.txt");
    let profile = tmp.join("p.json");
    let script = format!(
        "import os\nopen({:?}, 'w').write(os.environ['LD_PRELOAD'] + '\\n' + \
         repr(os.environ.get('PYTHONPATH')) + '\\n' + os.environ['MLPROF_DIR'] + '\\n')\n",
        out.display().to_string()
    );
    let run = run_in(
        &tmp,
        &[
            os("-q"),
            os("-o"),
            os(&profile),
            os("--"),
            os(&py.exe),
            os("-c"),
            os(&script),
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).expect("the program wrote its environment");
    let mut lines = text.lines();
    let (preload, pythonpath, run_dir) = (
        PathBuf::from(lines.next().unwrap()),
        lines.next().unwrap().to_string(),
        PathBuf::from(lines.next().unwrap()),
    );
    assert!(!run_dir.exists(), "the run's directory {run_dir:?} is gone");
    assert_eq!(pythonpath, "None", "mlprof set PYTHONPATH");
    for (what, path) in [("LD_PRELOAD", &preload)] {
        assert!(
            path.exists(),
            "{what} names {path:?}, which is gone after the run"
        );
        assert!(
            !path.starts_with(&run_dir),
            "{what} names the run's directory: {path:?}"
        );
        // Every directory from the lasting one down is ours alone.
        let lasting = tmp.join(format!("mlprof-{}", uid()));
        assert!(
            path.starts_with(&lasting),
            "{what}: {path:?} outside {lasting:?}"
        );
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&lasting)) {
            assert!(private_and_ours(d), "{what}: {d:?} is not private");
            dir = d.parent();
        }
        assert!(private_and_ours(path), "{what}: {path:?} is not private");
    }
}

/// `TMPDIR/mlprof-UID` made by someone else first (here: left open to every user) is refused
/// with one line naming it, and nothing runs.
#[test]
fn a_lasting_directory_someone_else_holds_is_refused_by_name() {
    let tmp = private_tmp();
    let squatted = tmp.join(format!("mlprof-{}", uid()));
    std::fs::create_dir(&squatted).unwrap();
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = tmp.join("ran");
    let run = run_in(&tmp, &[os("-q"), os("--"), os("touch"), os(&marker)]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains(&squatted.display().to_string())
            && stderr.contains("is not mlprof's private directory"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!marker.exists(), "the command ran");
    // Nothing was put in it.
    assert_eq!(std::fs::read_dir(&squatted).unwrap().count(), 0);
    // As root, one another user owns (private to them) is refused the same way.
    if uid() == 0 {
        std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&squatted, Some(65534), Some(65534)).unwrap();
        let run = run_in(&tmp, &[os("-q"), os("--"), os("true")]);
        assert_eq!(run.status.code(), Some(70));
        assert!(String::from_utf8_lossy(&run.stderr).contains("owner uid 65534"));
    } else {
        fixture::skipped("skipped in part: not root, no directory of another user's to make");
    }
}

/// A link another user planted at the `-o` path while the program ran is not written through:
/// the report is refused there, and the file the link points to is untouched.
#[test]
fn a_report_is_never_written_through_another_users_link() {
    if uid() != 0 {
        fixture::skipped("skipped: not root, no link of another user's to plant");
        return;
    }
    let py = &fixture::pythons()[0];
    let tmp = private_tmp();
    let victim = tmp.join("victim.txt");
    std::fs::write(&victim, "keep").unwrap();
    let report = tmp.join("report.json");
    let plant = format!(
        "import os\nos.symlink({victim:?}, {report:?})\nos.lchown({report:?}, 65534, 65534)\n",
        victim = victim.display().to_string(),
        report = report.display().to_string()
    );
    let run = run_in(
        &tmp,
        &[
            os("-q"),
            os("-o"),
            os(&report),
            os("--"),
            os(&py.exe),
            os("-c"),
            os(&plant),
        ],
    );
    // The program's own status stands; the report is said not written, and why.
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("report not written") && stderr.contains("symbolic link another user made"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}
