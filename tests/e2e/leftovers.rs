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

/// Ours, not a link, and none of the permission bits `closed` set.
fn ours_with(path: &Path, closed: u32) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.uid() == uid() && m.mode() & closed == 0 && !m.file_type().is_symlink())
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
        // Every directory from the lasting one down is ours, writable and listable by nobody
        // else (others may only go through it); the library is ours alone to write.
        let lasting = tmp.join(format!("mlprof-{}", uid()));
        assert!(
            path.starts_with(&lasting),
            "{what}: {path:?} outside {lasting:?}"
        );
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&lasting)) {
            assert!(ours_with(d, 0o066), "{what}: {d:?} is open to others");
            dir = d.parent();
        }
        assert!(
            ours_with(path, 0o022),
            "{what}: {path:?} is writable by others"
        );
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

/// A local user made for one test (`useradd`), removed at the end.
struct OtherUser {
    name: String,
    uid: u32,
}

impl OtherUser {
    fn create() -> OtherUser {
        let name = format!("mlproft{}", std::process::id() % 100_000);
        let _ = std::process::Command::new("userdel").arg(&name).output();
        let made = std::process::Command::new("useradd")
            .args(["-M", "-r", "-s", "/usr/sbin/nologin", &name])
            .output()
            .expect("run useradd");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let id = std::process::Command::new("id")
            .args(["-u", &name])
            .output()
            .unwrap();
        let uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        OtherUser { name, uid }
    }

    /// `setpriv` arguments that run what follows as this user.
    fn become_args(&self) -> Vec<String> {
        let id = self.uid.to_string();
        [
            "setpriv",
            "--reuid",
            &id,
            "--regid",
            &id,
            "--clear-groups",
            "--",
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let _ = std::process::Command::new("userdel")
            .arg(&self.name)
            .output();
    }
}

/// As root, with a second local user made for the test: while a run goes on, that user can
/// neither list nor read the run's directory, nor put anything where the run's `LD_PRELOAD`
/// points; a descendant that becomes that user (`setpriv`) gets no loader error and none of
/// the run's paths in its environment; after the run, the run's directory name made again by
/// that user is not used by the victim's leftover job, and the library it names is unchanged.
#[test]
fn a_second_user_can_neither_read_a_run_nor_take_over_what_it_leaves() {
    if uid() != 0
        || std::process::Command::new("setpriv")
            .arg("--help")
            .output()
            .is_err()
    {
        fixture::skipped("skipped: not root (or no setpriv), no second user to make");
        return;
    }
    let other = OtherUser::create();
    // A shared temporary directory like /tmp: everyone may create names, sticky.
    let tmp = fixture::tempdir();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (out, err, info) = (
        tmp.join("out.txt"),
        tmp.join("err.txt"),
        tmp.join("info.txt"),
    );
    let become_other = other.become_args().join(" ");
    // The other user's attempts, given the run's paths as arguments ($1 the run's directory,
    // $2 the preload library), and what its own environment holds.
    let attempts = "ls \"$1\" >/dev/null 2>&1 && echo LISTED; \
                    cat \"$1\"/* >/dev/null 2>&1 && echo READ; \
                    touch \"$(dirname \"$2\")/planted\" 2>/dev/null && echo PLANTED; \
                    cp /bin/true \"$2\" 2>/dev/null && echo REPLACED; \
                    echo \"env:[$LD_PRELOAD][$MLPROF_DIR]\"";
    let script = format!(
        "printf '%s\\n%s\\n' \"$MLPROF_DIR\" \"$LD_PRELOAD\" > {info}; \
         {become_other} sh -c '{attempts}' sh \"$MLPROF_DIR\" \"$LD_PRELOAD\" > {out} 2> {err}",
        info = info.display(),
        out = out.display(),
        err = err.display(),
    );
    let profile = tmp.join("p.json");
    let run = run_in(
        &tmp,
        &[
            os("-q"),
            os("-o"),
            os(&profile),
            os("--"),
            os("sh"),
            os("-c"),
            os(&script),
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let seen = std::fs::read_to_string(&out).unwrap();
    assert_eq!(seen, "env:[][]\n", "what the other user could do and has");
    assert_eq!(
        std::fs::read_to_string(&err).unwrap(),
        "",
        "the loader's errors"
    );
    let info = std::fs::read_to_string(&info).unwrap();
    let mut lines = info.lines();
    let (run_dir, preload) = (
        PathBuf::from(lines.next().unwrap()),
        PathBuf::from(lines.next().unwrap()),
    );
    let library = std::fs::read(&preload).unwrap();
    // After the run: the other user makes the run's directory name again, open to all.
    assert!(!run_dir.exists());
    let made = std::process::Command::new(&other.become_args()[0])
        .args(&other.become_args()[1..])
        .args(["sh", "-c", "mkdir -m 777 \"$1\"", "sh"])
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    // The victim's leftover job starts a program with the environment the run gave it.
    let leftover = std::process::Command::new("sh")
        .args(["-c", "echo \"[$LD_PRELOAD][$MLPROF_DIR]\""])
        .env("LD_PRELOAD", &preload)
        .env("MLPROF_DIR", &run_dir)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&leftover.stdout), "[][]\n");
    assert_eq!(String::from_utf8_lossy(&leftover.stderr), "");
    assert_eq!(
        std::fs::read_dir(&run_dir).unwrap().count(),
        0,
        "the leftover job wrote into the other user's directory"
    );
    assert_eq!(
        std::fs::read(&preload).unwrap(),
        library,
        "the library changed"
    );
    let _ = std::fs::remove_dir_all(&run_dir);
}

/// The run's directory always goes, however many fork children are making their channels as
/// the run ends (1 run in 6 left 2 MiB behind before it was renamed first): six runs whose
/// program forks children that fork again, some after the program and the run ended, leave
/// nothing in `TMPDIR` but the lasting directory.
#[test]
fn the_runs_directory_goes_even_while_fork_children_make_their_channels() {
    let py = &fixture::pythons()[0];
    let tmp = private_tmp();
    let code = "import os, time\n\
                for i in range(40):\n\
                \x20   if os.fork() == 0:\n\
                \x20       time.sleep(0.005 * (i % 8))\n\
                \x20       if os.fork() == 0:\n\
                \x20           os._exit(0)\n\
                \x20       os._exit(0)\n\
                os._exit(0)\n";
    for round in 0..6 {
        let run = run_in(&tmp, &[os("-q"), os("--"), os(&py.exe), os("-c"), os(code)]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        // The children still forking when mlprof ended are done well within this.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let left: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| *n != format!("mlprof-{}", uid()))
            .collect();
        assert!(left.is_empty(), "round {round}: left in TMPDIR: {left:?}");
    }
}
