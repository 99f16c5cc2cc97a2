//! One pipeline from a recording to a finished profile (issue 32): every way a profile is made
//! (a region's page, `attach`) gets what the run's report gets: hints unless `--no-hints`,
//! budgets, the sampling means and the CPUs. Before, region pages had no hints, no CPUs and
//! zero sampling means, and `attach` took neither budgets nor `--no-hints`.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use mlprof::model::Profile;

use crate::fixture;

/// Run the command on CPU 0 only: one CPU, so that two busy BLAS threads are more busy
/// threads than CPUs (the `threads` hint) whatever the machine.
fn on_one_cpu(cmd: &mut Command) -> &mut Command {
    // SAFETY: pre_exec runs in the forked child before exec; sched_setaffinity is a system
    // call on a local CPU set.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// The profile a report page embeds (`<script type="application/json" id="profile">`).
fn embedded(page: &str) -> Profile {
    let start = page
        .find(r#"id="profile">"#)
        .map(|i| i + r#"id="profile">"#.len())
        .expect("an embedded profile");
    let end = start + page[start..].find("</script>").expect("its end");
    serde_json::from_str(&page[start..end]).expect("the embedded profile reads back")
}

fn region_page(no_hints: bool) -> (Profile, Profile) {
    let py = &fixture::numpy_pythons()[0];
    let dir = fixture::tempdir();
    let (pages, out) = (dir.join("pages"), dir.join("run.json"));
    let mut cmd = fixture::mlprof();
    cmd.args(["run", "--memory-sample-bytes", "64KiB", "-q", "-o"])
        .arg(&out)
        .arg("--regions-html")
        .arg(&pages);
    if no_hints {
        cmd.arg("--no-hints");
    }
    let status = cmd
        .arg("--")
        .arg(&py.exe)
        .arg(fixture::script("region_pool.py"))
        .env("PYTHONPATH", fixture::root().join("python"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let run = fixture::check_profile(&std::fs::read_to_string(&out).unwrap());
    let page = embedded(&std::fs::read_to_string(pages.join("held.html")).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    (run, page)
}

#[test]
fn a_region_page_carries_the_runs_hints_cpus_and_sampling_means() {
    let held = crate::cpu::markers("region_pool.py")["held"];
    let (run, page) = region_page(false);
    assert!(run.cpus > 0);
    assert_eq!(
        (page.cpus, page.memory_sample_bytes, page.copy_sample_bytes),
        (run.cpus, 64 << 10, 1 << 20),
        "the region's page says how the run was recorded"
    );
    // The float64 rule reads the line's source text: hints come after the sources.
    assert!(
        page.hints
            .iter()
            .any(|h| h.kind.as_str() == "float64" && h.line == Some(held)),
        "the page's hints: {:?}",
        page.hints
    );
    let (_, quiet) = region_page(true);
    assert!(quiet.hints.is_empty(), "--no-hints: {:?}", quiet.hints);
}

/// `mlprof attach` on the region script's long form, on one CPU: its status and profile.
fn attach_pool(options: &[&str]) -> (Option<i32>, String, Profile) {
    let py = &fixture::numpy_pythons()[0];
    let (mut child, _out) = crate::attach::started_with(
        &py.exe,
        "region_pool.py",
        "6",
        &[("OPENBLAS_NUM_THREADS", "2")],
    );
    let dir = fixture::tempdir();
    let path = dir.join("attach.json");
    let pid = child.id().to_string();
    let mut cmd = fixture::mlprof();
    cmd.args(["attach", &pid, "--duration", "1.5", "-o"])
        .arg(&path)
        .args(options);
    let done = on_one_cpu(&mut cmd).output().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    (
        done.status.code(),
        String::from_utf8_lossy(&done.stderr).into_owned(),
        p,
    )
}

#[test]
fn attach_applies_budgets_and_no_hints_as_run_does() {
    let (code, stderr, p) = attach_pool(&["--max-rss", "1KiB"]);
    assert_eq!(code, Some(mlprof::gate::EXIT_BUDGET), "{stderr}");
    assert!(stderr.contains("peak RSS"), "{stderr}");
    assert_eq!(p.violations.len(), 1, "{:?}", p.violations);
    assert!(p.attached && p.cpus == 1);
    assert!(
        p.hints.iter().any(|h| h.kind.as_str() == "threads"),
        "attach draws hints: {:?}",
        p.hints
    );
    let (code, stderr, p) = attach_pool(&["--no-hints", "--max-rss", "1TiB"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        p.violations.is_empty() && p.hints.is_empty(),
        "{:?}",
        p.hints
    );
}
