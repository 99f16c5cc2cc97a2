//! Exports (issue 5): stacks of a real profile, read back in each format; totals agree with
//! the profile's own per-line figures. Issue 34: each export opens on the measure asked for,
//! and module-level code is `<module>` in all of them (pprof read by a decoder of our own, and
//! by `go tool pprof` where Go is installed).

use std::collections::HashMap;

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
    fixture::read_with("export", profile, args)
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
        .map(|l| l.measures.cpu_python_s + l.measures.cpu_native_s + l.measures.kernel_s)
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
            let s = s.as_array().unwrap();
            // A stack without frames is `<no Python frame>`: speedscope shows an empty
            // sample in no frame.
            assert!(!s.is_empty(), "a sample without a frame");
            assert!(s
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

/// `tests/scripts/module_level.py` profiled: (its profile file, the script, its markers).
fn module_level_profile(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, HashMap<String, u32>) {
    let py = &fixture::pythons()[0];
    let out = dir.join("module.json");
    let script = fixture::script("module_level.py");
    fixture::run_to(&out, &[os(&py.exe), os(&script)], &[]);
    (out, script, crate::cpu::markers("module_level.py"))
}

fn pprof_export(profile: &std::path::Path, measure: &str) -> pprof::Pprof {
    let out = fixture::mlprof()
        .arg("export")
        .arg(profile)
        .args(["--format", "pprof", "--measure", measure])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(&out.stdout[..2], &[0x1f, 0x8b], "gzipped");
    pprof::Pprof::decode(&out.stdout)
}

/// Issue 34: the pprof file opens on the measure asked for (its default sample type), and
/// module-level code is the function `<module>` (no system name, which pprof would strip of
/// `<...>`, showing the program's mapping instead), holding the time its lines took; folded
/// stacks and speedscope name it the same. Read back by a decoder of our own, so this holds
/// without Go.
#[test]
fn exports_open_on_the_measure_asked_for_and_name_module_code() {
    let dir = fixture::tempdir();
    let (path, script, m) = module_level_profile(&dir);
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    let file = script.to_str().unwrap();
    for (measure, sample_type) in [
        ("cpu", "cpu"),
        ("wall", "wall"),
        ("alloc", "alloc_space"),
        ("peak", "inuse_space"),
    ] {
        let pb = pprof_export(&path, measure);
        assert_eq!(pb.default_sample_type, sample_type, "--measure {measure}");
        assert_eq!(
            pb.sample_types,
            ["cpu", "wall", "alloc_space", "inuse_space"],
            "every measure stays in the file"
        );
    }

    let pb = pprof_export(&path, "cpu");
    let module = pb
        .functions
        .values()
        .find(|f| f.name == "<module>" && f.filename == file)
        .unwrap_or_else(|| panic!("no <module> of {file}: {:?}", pb.functions));
    assert_eq!(
        module.system_name, "",
        "pprof would strip a system name of <...>"
    );
    let helper = pb
        .functions
        .values()
        .find(|f| f.name == "helper" && f.filename == file)
        .expect("the helper function");
    // Flat CPU by leaf function and line, from the samples.
    let cpu = pb.index("cpu");
    let flat = |name: &str, line: Option<u32>| -> f64 {
        pb.samples
            .iter()
            .filter(|s| {
                let leaf = pb.leaf(s);
                leaf.is_some_and(|(f, l)| {
                    f.name == name && f.filename == file && line.is_none_or(|want| want == l)
                })
            })
            .map(|s| s.values[cpu] as f64 / 1e9)
            .sum()
    };
    let line_cpu = |n: u32| {
        let l = crate::cpu::line(&p, "module_level.py", n);
        // CPU as the export counts it: the kernel's on page faults too.
        l.measures.cpu_python_s + l.measures.cpu_native_s + l.measures.kernel_s
    };
    let (at_module, want) = (flat("<module>", Some(m["module"])), line_cpu(m["module"]));
    assert!(
        (at_module - want).abs() <= 0.01 * want + 0.002,
        "the module loop's CPU in pprof {at_module} vs its line {want}"
    );
    // 0.6 s at module level, then 0.3 s in helper, by construction: the sample straddling the
    // loop's end carries its tail into helper, one mean gap on a quiet machine, up to the
    // run's largest sample where the kernel's timers fire late (a loaded one: 0.1 s once).
    // Together they hold the 0.9 s, less what the sample straddling helper's end carries to
    // the interpreter's shutdown.
    let lost = fixture::straddle(&p, 2.0);
    let (module, in_helper) = (flat("<module>", None), flat("helper", None));
    assert!(
        module >= 0.6 * 0.9 - lost
            && in_helper <= 0.3 * 1.1 + lost
            && module + in_helper >= 0.9 * 0.9 - lost,
        "0.6 s at module level vs 0.3 s in helper: {module} vs {in_helper} (straddling {lost})"
    );
    assert!(helper.system_name.is_empty());
    let main_pid = p.processes[0].pid as i64;
    assert!(
        pb.samples
            .iter()
            .all(|s| s.labels.iter().any(|l| l.0 == "pid" && l.2 > 0))
            && pb.samples.iter().any(|s| s.labels.contains(&(
                "pid".into(),
                String::new(),
                main_pid
            ))),
        "each sample names its process"
    );
    assert!(
        pb.samples.iter().all(|s| s
            .labels
            .iter()
            .any(|l| l.0 == "host" && Some(&l.1) == p.labels.get("host"))),
        "each sample has the profile's labels"
    );

    // The same name in the other exports.
    let folded = export(&path, &["--format", "folded"]);
    let frame = format!("<module> ({file}:{})", m["module"]);
    assert!(
        folded
            .lines()
            .any(|l| l.split(';').any(|f| f.starts_with(&frame))),
        "{frame} in {folded}"
    );
    for (measure, title) in [("cpu", "CPU time"), ("alloc", "bytes allocated")] {
        let doc: serde_json::Value = serde_json::from_str(&export(
            &path,
            &["--format", "speedscope", "--measure", measure],
        ))
        .unwrap();
        let active = doc["activeProfileIndex"].as_u64().unwrap() as usize;
        assert_eq!(doc["profiles"][active]["name"], title);
        assert!(doc["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| { f["name"] == "<module>" && f["file"] == file && f["line"] == m["module"] }));
    }

    // A trace has every track: a measure is a usage error, in one line.
    let bad = fixture::mlprof()
        .arg("export")
        .arg(&path)
        .args(["--format", "chrome-trace", "--measure", "alloc"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--measure"), "{stderr}");
}

/// The same file read by `go tool pprof`, where Go is installed: `-top` without
/// `-sample_index` shows the measure exported, and module-level code as `<module>`, not as
/// the program's mapping (`[python3 module_level.py]`).
#[test]
fn pprof_export_is_read_by_go_tool_pprof() {
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_err()
    {
        crate::fixture::skipped("skipped: `go` is not installed (go tool pprof reads the export)");
        return;
    }
    let dir = fixture::tempdir();
    let (path, _, _) = module_level_profile(&dir);
    let top = |measure: &str| {
        let out = dir.join(format!("{measure}.pb.gz"));
        let status = fixture::mlprof()
            .arg("export")
            .arg(&path)
            .args(["--format", "pprof", "--measure", measure, "-o"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success());
        let top = std::process::Command::new("go")
            .args(["tool", "pprof", "-top"])
            .arg(&out)
            .env("HOME", &dir)
            .output()
            .unwrap();
        assert!(
            top.status.success(),
            "{}",
            String::from_utf8_lossy(&top.stderr)
        );
        String::from_utf8_lossy(&top.stdout).into_owned()
    };
    let cpu = top("cpu");
    assert!(cpu.contains("Type: cpu"), "{cpu}");
    // The rows after the header: `flat flat% sum% cum cum% name`.
    let names: Vec<&str> = cpu
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    // First is the function with the most flat CPU by the export itself: `<module>` (0.6 s
    // against helper's 0.3 s), unless a late sample carried the loop's tail into helper (on a
    // machine busier than its cores: 0.55 s against 0.30 s once), or carried both into the
    // interpreter's shutdown, `<no Python frame>` (0.51 s once, helper's 0.3 s all of it).
    let pb = pprof_export(&path, "cpu");
    let index = pb.index("cpu");
    let mut flat: HashMap<&str, i64> = HashMap::new();
    for s in &pb.samples {
        let name = pb.leaf(s).map_or("", |(f, _)| f.name.as_str());
        *flat.entry(name).or_default() += s.values[index];
    }
    let most = flat
        .iter()
        .max_by_key(|(_, &v)| v)
        .map(|(&name, _)| name)
        .unwrap();
    assert_eq!(names.first(), Some(&most), "{cpu}");
    assert!(names.contains(&"<module>"), "{cpu}");
    // Helper's 0.3 s is listed, unless one sample of the run could hold all of it.
    let p = fixture::check_profile(&std::fs::read_to_string(&path).unwrap());
    assert!(
        names.contains(&"helper") || fixture::straddle(&p, 0.0) >= 0.3,
        "{cpu}"
    );
    // Every sample has a leaf, so pprof shows it in a row: those without a Python frame in
    // `<no Python frame>`'s (a sample without a location is in pprof's total and no row).
    assert!(
        pb.samples.iter().all(|s| pb.leaf(s).is_some()),
        "every sample has a leaf"
    );
    assert!(
        !names.iter().any(|n| n.starts_with('[')),
        "no time left to a mapping: {cpu}"
    );
    let alloc = top("alloc");
    assert!(alloc.contains("Type: alloc_space"), "{alloc}");
    let peak = top("peak");
    assert!(peak.contains("Type: inuse_space"), "{peak}");
}

/// A reader of pprof's `profile.proto` (gzipped), written from the format's description and
/// independent of the exporter: the fields the tests look at.
mod pprof {
    use std::collections::HashMap;
    use std::io::Read;

    #[derive(Debug, Default)]
    pub struct Function {
        pub name: String,
        pub system_name: String,
        pub filename: String,
    }

    #[derive(Debug, Default)]
    pub struct Sample {
        /// Location ids, leaf first.
        pub locations: Vec<u64>,
        pub values: Vec<i64>,
        /// (key, string value, number).
        pub labels: Vec<(String, String, i64)>,
    }

    #[derive(Debug, Default)]
    pub struct Pprof {
        pub sample_types: Vec<String>,
        pub default_sample_type: String,
        pub samples: Vec<Sample>,
        /// Location id -> (function id, line) of its first line.
        pub locations: HashMap<u64, (u64, i64)>,
        pub functions: HashMap<u64, Function>,
    }

    enum Value<'a> {
        Int(u64),
        Bytes(&'a [u8]),
    }

    fn varint(b: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let (&byte, rest) = b.split_first().expect("a truncated varint");
            *b = rest;
            v |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return v;
            }
        }
    }

    /// The fields of one message, in order.
    fn fields(mut b: &[u8]) -> Vec<(u64, Value<'_>)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let value = match key & 7 {
                0 => Value::Int(varint(&mut b)),
                2 => {
                    let len = varint(&mut b) as usize;
                    let (v, rest) = b.split_at(len);
                    b = rest;
                    Value::Bytes(v)
                }
                other => panic!("wire type {other} is not in profile.proto"),
            };
            out.push((key >> 3, value));
        }
        out
    }

    fn int(v: &Value) -> u64 {
        match v {
            Value::Int(i) => *i,
            Value::Bytes(_) => panic!("a varint expected"),
        }
    }

    /// A repeated integer field, packed or not.
    fn ints(v: &Value, into: &mut Vec<u64>) {
        match v {
            Value::Int(i) => into.push(*i),
            Value::Bytes(mut b) => {
                while !b.is_empty() {
                    into.push(varint(&mut b));
                }
            }
        }
    }

    fn message<'a>(v: &Value<'a>) -> Vec<(u64, Value<'a>)> {
        match v {
            Value::Bytes(b) => fields(b),
            Value::Int(_) => panic!("a message expected"),
        }
    }

    impl Pprof {
        pub fn decode(gzipped: &[u8]) -> Pprof {
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(gzipped)
                .read_to_end(&mut raw)
                .expect("gzip");
            let top = fields(&raw);
            let strings: Vec<String> = top
                .iter()
                .filter(|f| f.0 == 6)
                .map(|f| match f.1 {
                    Value::Bytes(b) => String::from_utf8(b.to_vec()).expect("UTF-8"),
                    Value::Int(_) => panic!("a string expected"),
                })
                .collect();
            assert_eq!(strings.first().map(String::as_str), Some(""), "string 0");
            let s = |i: u64| strings[i as usize].clone();
            let mut p = Pprof::default();
            for (field, value) in &top {
                match field {
                    1 => {
                        let t = message(value);
                        let kind = t.iter().find(|f| f.0 == 1).map_or(0, |f| int(&f.1));
                        p.sample_types.push(s(kind));
                    }
                    2 => {
                        let mut sample = Sample::default();
                        let mut values = Vec::new();
                        for (f, v) in message(value) {
                            match f {
                                1 => ints(&v, &mut sample.locations),
                                2 => ints(&v, &mut values),
                                3 => {
                                    let l = message(&v);
                                    let get =
                                        |n| l.iter().find(|f| f.0 == n).map_or(0, |f| int(&f.1));
                                    sample.labels.push((s(get(1)), s(get(2)), get(3) as i64));
                                }
                                _ => {}
                            }
                        }
                        sample.values = values.into_iter().map(|v| v as i64).collect();
                        p.samples.push(sample);
                    }
                    4 => {
                        let l = message(value);
                        let id = l.iter().find(|f| f.0 == 1).map_or(0, |f| int(&f.1));
                        let line = l.iter().find(|f| f.0 == 4).map(|f| message(&f.1));
                        let line = line.unwrap_or_default();
                        let get = |n| line.iter().find(|f| f.0 == n).map_or(0, |f| int(&f.1));
                        p.locations.insert(id, (get(1), get(2) as i64));
                    }
                    5 => {
                        let f = message(value);
                        let get = |n| f.iter().find(|x| x.0 == n).map_or(0, |x| int(&x.1));
                        p.functions.insert(
                            get(1),
                            Function {
                                name: s(get(2)),
                                system_name: s(get(3)),
                                filename: s(get(4)),
                            },
                        );
                    }
                    14 => p.default_sample_type = s(int(value)),
                    _ => {}
                }
            }
            for sample in &p.samples {
                assert_eq!(sample.values.len(), p.sample_types.len());
            }
            p
        }

        /// The index of a sample type.
        pub fn index(&self, kind: &str) -> usize {
            self.sample_types
                .iter()
                .position(|t| t == kind)
                .unwrap_or_else(|| panic!("no sample type {kind}"))
        }

        /// A sample's leaf: its function and line.
        pub fn leaf(&self, s: &Sample) -> Option<(&Function, u32)> {
            let (function, line) = self.locations.get(s.locations.first()?)?;
            Some((self.functions.get(function)?, *line as u32))
        }
    }
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
