//! The memory-budget gate (issue 7): a budget exceeded fails with exit 97 and names the lines
//! holding the memory; the verdict is the same on every run (exact heap counters); the
//! program's own failure keeps its own exit code.

use mlprof::model::{Amount, Budget};

use crate::fixture::{self, os};

fn run(args: &[&str], size_mb: &str, how: &str) -> (Option<i32>, String) {
    let py = &fixture::numpy_pythons()[0];
    let script = fixture::script("keep_array.py");
    let program = [os(&py.exe), os(&script), os(size_mb), os(how)];
    let out = fixture::run(&[&["-q"], args].concat(), &program, &[]);
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

#[test]
fn a_cpu_budget_is_judged_and_saved_in_seconds() {
    let dir = fixture::tempdir();
    let file = dir.join("mlprof.toml");
    std::fs::write(&file, "max-cpu = 0.001\n").unwrap();
    let saved = dir.join("p.json");
    let args = [
        "--budget",
        file.to_str().unwrap(),
        "-o",
        saved.to_str().unwrap(),
    ];
    let (code, stderr) = run(&args, "100", "exit");
    assert_eq!(code, Some(97), "{stderr}");
    assert!(stderr.contains("budget exceeded: CPU time"), "{stderr}");
    // Valid against the documented schema, which wants seconds for `cpu`, not bytes.
    let text = std::fs::read_to_string(&saved).unwrap();
    let p = fixture::check_profile(&text);
    let v = &p.violations[0];
    assert_eq!(v.budget, Budget::Cpu, "{:?}", p.violations);
    let Amount::Seconds { limit_s, actual_s } = v.amount else {
        panic!("a CPU budget in bytes: {v:?}");
    };
    assert_eq!(limit_s, 0.001);
    assert!(actual_s > limit_s && actual_s <= p.cpu_s() + 1e-9, "{v:?}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(json["violations"][0].get("limit_bytes").is_none(), "{json}");
}

#[test]
fn budget_files_set_per_line_and_per_function_limits_and_bad_files_fail_first() {
    let kept = crate::cpu::markers("keep_array.py")["kept"];
    let dir = fixture::tempdir();
    let file = dir.join("mlprof.toml");
    std::fs::write(
        &file,
        format!(
            "[lines]\n\"keep_array.py:{kept}\" = \"100MiB\"\n\"keep_array.py:1\" = \"1MiB\"\n[functions]\n\"keep_array.py::<module>\" = \"150MiB\"\n"
        ),
    )
    .unwrap();
    let (code, stderr) = run(&["--budget", file.to_str().unwrap()], "200", "exit");
    assert_eq!(code, Some(97), "{stderr}");
    let violations: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("mlprof: budget exceeded"))
        .collect();
    assert_eq!(
        violations.len(),
        2,
        "the kept line and its function, not line 1: {violations:?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains(&format!("keep_array.py:{kept} held 190."))),
        "{violations:?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains("keep_array.py::<module> held")),
        "{violations:?}"
    );

    // Found from the working directory upward when no file is named.
    let py = &fixture::numpy_pythons()[0];
    let nested = dir.join("sub/dir");
    std::fs::create_dir_all(&nested).unwrap();
    let found = fixture::mlprof()
        .args(["run", "-q", "--budget", "--"])
        .arg(&py.exe)
        .arg(fixture::script("keep_array.py"))
        .args(["200", "exit"])
        .current_dir(&nested)
        .output()
        .unwrap();
    assert_eq!(
        found.status.code(),
        Some(97),
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );

    std::fs::write(&file, "[lines]\n\"a.py:3\" = = \"1GiB\"\n").unwrap();
    let bad = fixture::mlprof()
        .args(["run", "--budget"])
        .arg(&file)
        .args(["--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(70), "{err}");
    assert!(
        err.starts_with(&format!("mlprof: {}:2:", file.display())),
        "file:line:column: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(bad.stdout.is_empty(), "the program did not run");
}

#[test]
fn ci_gets_annotations_a_job_summary_and_junit() {
    let kept = crate::cpu::markers("keep_array.py")["kept"];
    let dir = fixture::tempdir();
    let (summary, junit) = (dir.join("summary.md"), dir.join("budgets.xml"));
    let py = &fixture::numpy_pythons()[0];
    let out = fixture::mlprof()
        .args(["run", "-q", "--max-peak", "100MiB", "--junit"])
        .arg(&junit)
        .arg("--")
        .arg(&py.exe)
        .arg(fixture::script("keep_array.py"))
        .args(["200", "exit"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(97));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let script = fixture::script("keep_array.py");
    let annotation = format!(
        "::error file={},line={kept},title=mlprof budget::budget exceeded: peak heap",
        script.display()
    );
    assert!(stdout.contains(&annotation), "{stdout}");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.contains("| peak_heap | 100.0 MiB |") && md.contains(&format!("`keep_array.py:{kept}`")),
        "{md}"
    );
    let parse = std::process::Command::new(&fixture::pythons()[0].exe)
        .args(["-c", "import sys, xml.etree.ElementTree as E; s = E.parse(sys.argv[1]).getroot(); print(s.get('failures'), len(s.findall('testcase/failure')))"])
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&parse.stdout),
        "1 1\n",
        "{}",
        String::from_utf8_lossy(&parse.stderr)
    );
}

#[test]
fn a_baseline_flags_a_doubled_line_and_not_noise() {
    let kept = crate::cpu::markers("keep_array.py")["kept"];
    let dir = fixture::tempdir();
    let base = dir.join("base.json");
    let (code, _) = run(&["-o", base.to_str().unwrap()], "100", "exit");
    assert_eq!(code, Some(0));

    let (code, stderr) = run(&["--baseline", base.to_str().unwrap()], "200", "exit");
    assert_eq!(code, Some(97), "{stderr}");
    let line_regression = format!("mlprof: regression: keep_array.py:{kept} allocated 190.");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with(&line_regression) && l.ends_with("(+100%)")),
        "{stderr}"
    );
    assert!(stderr.contains("regression: peak heap"), "{stderr}");

    let (code, stderr) = run(&["--baseline", base.to_str().unwrap()], "101", "exit");
    assert_eq!(code, Some(0), "a 1% move is noise: {stderr}");
    assert!(!stderr.contains("regression"), "{stderr}");

    let now = dir.join("now.json");
    let (code, _) = run(&["-o", now.to_str().unwrap()], "200", "exit");
    assert_eq!(code, Some(0));
    let check = fixture::mlprof()
        .arg("check")
        .arg(&now)
        .arg("--baseline")
        .arg(&base)
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(97),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}
