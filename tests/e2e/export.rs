//! Exports (issue 5): stacks of a real profile, read back in each format; totals agree with
//! the profile's own per-line figures.

use crate::fixture::{self, os};

fn profile_file(dir: &std::path::Path) -> std::path::PathBuf {
    let py = &fixture::numpy_pythons()[0];
    let out = dir.join("p.json");
    let script = fixture::script("cpu_lines.py");
    let program = [os(&py.exe), os(&script), os("lines")];
    fixture::run_to(&out, &program, &[("OPENBLAS_NUM_THREADS", "1")]);
    out
}

fn export(profile: &std::path::Path, args: &[&str]) -> String {
    let out = fixture::mlprof()
        .arg("export")
        .arg(profile)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// speedscope's published file-format schema, as `scripts/test.sh` fetches it; `None` when it
/// is missing, which fails the test where test data is required (`MLPROF_REQUIRE_TEST_DATA=1`,
/// set by CI).
fn speedscope_schema() -> Option<serde_json::Value> {
    let path = fixture::root().join("target/test-data/speedscope-file-format-schema.json");
    let text = std::fs::read_to_string(&path).ok();
    if text.is_none() && std::env::var_os("MLPROF_REQUIRE_TEST_DATA").is_some_and(|v| v == "1") {
        panic!("{} is missing (scripts/test.sh fetches it)", path.display());
    }
    Some(serde_json::from_str(&text?).expect("speedscope's schema is JSON"))
}

#[test]
fn folded_and_speedscope_exports_read_back_with_the_profiles_totals() {
    let dir = fixture::tempdir();
    let path = profile_file(&dir);
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let cpu_lines: f64 = p
        .lines
        .iter()
        .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
        .sum();

    let folded = export(&path, &["--format", "folded"]);
    let mut total_us = 0u64;
    for line in folded.lines() {
        let (stack, value) = line.rsplit_once(' ').expect("`stack value`");
        assert!(!stack.is_empty());
        total_us += value.parse::<u64>().expect("integer value");
    }
    let folded_s = total_us as f64 / 1e6;
    assert!(
        (folded_s - cpu_lines).abs() <= 0.01 * cpu_lines + 0.001,
        "{folded_s} vs {cpu_lines}"
    );
    assert!(
        folded.contains("pure_python (") && folded.contains("blas ("),
        "user functions in the stacks"
    );

    let doc: serde_json::Value =
        serde_json::from_str(&export(&path, &["--format", "speedscope"])).unwrap();
    assert_eq!(
        doc["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    match speedscope_schema() {
        Some(schema) => {
            let validator = jsonschema::validator_for(&schema).expect("speedscope's schema");
            let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "not a speedscope file: {errors:?}");
            let mut broken = doc.clone();
            broken["profiles"][0]["type"] = serde_json::json!("flamegraph");
            assert!(
                !validator.is_valid(&broken),
                "the schema checks profile types"
            );
        }
        None => crate::fixture::skipped(
            "skipped: speedscope's schema is not in target/test-data (scripts/test.sh fetches it)",
        ),
    }
    let frames = doc["shared"]["frames"].as_array().unwrap();
    assert!(frames.iter().all(|f| f["name"].is_string()));
    let profiles = doc["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"CPU time") && names.contains(&"bytes allocated"),
        "{names:?}"
    );
    for prof in profiles {
        assert_eq!(prof["type"], "sampled");
        let samples = prof["samples"].as_array().unwrap();
        let weights = prof["weights"].as_array().unwrap();
        assert_eq!(samples.len(), weights.len());
        for s in samples {
            assert!(s
                .as_array()
                .unwrap()
                .iter()
                .all(|i| (i.as_u64().unwrap() as usize) < frames.len()));
        }
        let sum: f64 = weights.iter().map(|w| w.as_f64().unwrap()).sum();
        assert!((sum - prof["endValue"].as_f64().unwrap()).abs() < 1e-6 * sum.max(1.0));
    }
    let cpu = profiles.iter().find(|p| p["name"] == "CPU time").unwrap();
    let cpu_s = cpu["endValue"].as_f64().unwrap();
    assert!(
        (cpu_s - cpu_lines).abs() <= 0.01 * cpu_lines + 0.001,
        "{cpu_s} vs {cpu_lines}"
    );

    let bad = fixture::mlprof()
        .args(["export", "/nonexistent.json", "--format", "folded"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(70));
    assert_eq!(String::from_utf8_lossy(&bad.stderr).lines().count(), 1);
}

#[test]
fn pprof_export_is_read_by_go_tool_pprof() {
    let dir = fixture::tempdir();
    let path = profile_file(&dir);
    let out = dir.join("p.pb.gz");
    let status = fixture::mlprof()
        .arg("export")
        .arg(&path)
        .args(["--format", "pprof", "-o"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzipped");
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_err()
    {
        eprintln!(
            "NOTICE: `go` is not installed: the pprof export was not read back by go tool pprof"
        );
        return;
    }
    let top = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=cpu"])
        .arg(&out)
        .env("HOME", &dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(text.contains("Type: cpu"), "{text}");
    assert!(
        text.contains("pure_python"),
        "the pure-Python function is in the top list: {text}"
    );
    let alloc = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=alloc_space"])
        .arg(&out)
        .env("HOME", &dir)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&alloc.stdout).contains("Type: alloc_space"));
}

#[test]
fn chrome_trace_events_have_the_required_fields() {
    let dir = fixture::tempdir();
    let path = profile_file(&dir);
    let doc: serde_json::Value =
        serde_json::from_str(&export(&path, &["--format", "chrome-trace"])).unwrap();
    let events = doc["traceEvents"].as_array().expect("traceEvents array");
    assert!(events.len() > 10);
    for e in events {
        assert!(e["name"].is_string() && e["ph"].is_string(), "{e}");
        assert!(
            e["ts"].is_number() && e["pid"].is_u64() && e["tid"].is_u64(),
            "{e}"
        );
        if e["ph"] == "C" {
            assert!(
                e["args"]
                    .as_object()
                    .is_some_and(|a| a.values().all(|v| v.is_number())),
                "{e}"
            );
        }
    }
    let names: std::collections::HashSet<&str> =
        events.iter().filter_map(|e| e["name"].as_str()).collect();
    for n in ["process_name", "memory", "CPU (cores busy)"] {
        assert!(names.contains(n), "{n} track missing: {names:?}");
    }
    let frames = doc["stackFrames"].as_object().expect("stackFrames");
    let samples = doc["samples"].as_array().expect("samples");
    assert!(samples.len() > 10, "CPU samples on the timeline");
    for s in samples {
        assert!(s["ts"].is_number() && s["tid"].is_u64() && s["name"].is_string());
        assert!(frames.contains_key(s["sf"].as_str().unwrap()), "{s}");
    }
    for f in frames.values() {
        assert!(
            f["parent"]
                .as_str()
                .is_none_or(|parent| frames.contains_key(parent)),
            "{f}"
        );
    }
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let cpu: f64 = p.cpu_timeline.iter().map(|b| b.python_s + b.native_s).sum();
    let lines: f64 = p
        .lines
        .iter()
        .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s)
        .sum();
    assert!(
        (cpu - lines).abs() <= 0.01 * lines + 0.001,
        "timeline {cpu} vs lines {lines}"
    );
}
