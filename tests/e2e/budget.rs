//! The memory-budget gate (issue 7): a budget exceeded fails with exit 97 and names the lines
//! holding the memory; the verdict is the same on every run (exact heap counters); the
//! program's own failure keeps its own exit code.

use crate::fixture;

fn run(args: &[&str], size_mb: &str, how: &str) -> (Option<i32>, String) {
    let py = &fixture::numpy_pythons()[0];
    let out = fixture::mlprof()
        .args(["run", "-q"])
        .args(args)
        .arg("--")
        .arg(&py.exe)
        .arg(fixture::script("keep_array.py"))
        .args([size_mb, how])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_peak_over_budget_fails_the_run_and_names_the_line_every_time() {
    let line = crate::cpu::markers("keep_array.py")["kept"];
    for _ in 0..5 {
        let (code, stderr) = run(&["--max-peak", "300MiB"], "400", "exit");
        assert_eq!(code, Some(97), "{stderr}");
        let message = stderr
            .lines()
            .find(|l| l.starts_with("mlprof: budget exceeded: peak heap"))
            .expect(&stderr);
        assert!(
            message.contains(&format!("keep_array.py:{line} held 381.")),
            "{message}"
        );
        assert!(message.contains("> 300.0 MiB"), "{message}");
    }
    let (code, stderr) = run(&["--max-peak", "1GiB"], "400", "exit");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("budget exceeded"));
}

#[test]
fn the_programs_own_failure_keeps_its_code_and_check_gates_a_saved_profile() {
    let (code, stderr) = run(&["--max-peak", "100MiB"], "200", "kill");
    assert_eq!(
        code,
        Some(128 + 9),
        "killed program's status wins: {stderr}"
    );
    assert!(stderr.contains("budget exceeded: peak heap"), "{stderr}");

    let dir = fixture::tempdir();
    let saved = dir.join("p.json");
    let (code, _) = run(&["-o", saved.to_str().unwrap()], "200", "exit");
    assert_eq!(code, Some(0));
    let check = |limit: &str| {
        fixture::mlprof()
            .arg("check")
            .arg(&saved)
            .args(["--max-peak", limit])
            .output()
            .unwrap()
    };
    assert_eq!(check("100MiB").status.code(), Some(97));
    assert_eq!(check("1GiB").status.code(), Some(0));
    let none = fixture::mlprof().arg("check").arg(&saved).output().unwrap();
    assert_eq!(
        none.status.code(),
        Some(2),
        "no budget given is a usage error"
    );
}
