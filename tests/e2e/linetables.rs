//! Line tables of every code object of the standard library (every 2nd file), on every
//! CPython build the fixture finds: mlprof's decoder (`LineIndex` and `line_for`) against
//! CPython's own `co_lines()` / `co_lnotab` per instruction offset.

use std::path::Path;

use mlprof::symbolize::linetable::{line_for, LineIndex, LineTableFormat};

use crate::fixture;

/// Per-Python tally of what the differential test compared.
#[derive(Default)]
struct Tally {
    version: String,
    code_objects: u64,
    units: u64,
    line_for_checked: u64,
    minus_one_checked: u64,
    mismatches: u64,
    examples: Vec<String>,
    trailer: Option<[u64; 4]>,
}

impl Tally {
    fn mismatch(&mut self, what: String) {
        self.mismatches += 1;
        if self.examples.len() < 10 {
            self.examples.push(what);
        }
    }
}

fn run_dump(python: &Path) -> String {
    let script = fixture::script("dump_linetables.py");
    let stride = std::env::var("MLPROF_LINETABLE_STRIDE").unwrap_or_else(|_| "2".to_string());
    let out = std::process::Command::new(python)
        .args(["-I", "-S"])
        .arg(&script)
        .args(["--stride", &stride])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("dump is ASCII")
}

fn hex_decode(hex: &str) -> Vec<u8> {
    if hex == "." {
        return Vec::new();
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("bad hex digit {c}"),
    };
    hex.as_bytes()
        .chunks(2)
        .map(|p| (nib(p[0]) << 4) | nib(p[1]))
        .collect()
}

/// Expands `LINE[*COUNT],...` (`-` = no line, `.` = nothing).
fn expand_rle(rle: &str) -> Vec<Option<u32>> {
    let mut out = Vec::new();
    if rle == "." {
        return out;
    }
    for tok in rle.split(',') {
        let (line, count) = tok.split_once('*').unwrap_or((tok, "1"));
        let line = if line == "-" {
            None
        } else {
            Some(line.parse().expect("line"))
        };
        out.extend(std::iter::repeat_n(line, count.parse().expect("count")));
    }
    out
}

fn parse_m1(field: &str) -> Option<Option<u32>> {
    match field {
        "?" => None,
        "-" => Some(None),
        n => Some(Some(n.parse().expect("minus-one line"))),
    }
}

/// One `C first units m1 hex rle` record: LineIndex at every code unit,
/// line_for at every unit (or an even spread on huge code objects), and
/// lasti = -1 when the dump has CPython's answer.
fn check_code(format: LineTableFormat, rec: &str, t: &mut Tally) {
    let f: Vec<&str> = rec.split(' ').collect();
    assert_eq!(f.len(), 5, "bad record {rec}");
    let first: i32 = f[0].parse().expect("firstlineno");
    let units: usize = f[1].parse().expect("units");
    let table = hex_decode(f[3]);
    let want = expand_rle(f[4]);
    assert_eq!(want.len(), units, "rle length in {rec}");
    let index = LineIndex::new(format, &table, first);
    let step = (units * table.len() / 1_000).max(1);
    for (u, &line) in want.iter().enumerate() {
        let lasti = i32::try_from(u).expect("offset fits i32");
        let got = index.line(lasti);
        if got != line {
            t.mismatch(format!(
                "LineIndex unit {u}: got {got:?} want {line:?} (first {first} table {})",
                f[3]
            ));
        }
        if u % step == 0 {
            t.line_for_checked += 1;
            let got = line_for(format, &table, first, lasti);
            if got != line {
                t.mismatch(format!(
                    "line_for unit {u}: got {got:?} want {line:?} (first {first} table {})",
                    f[3]
                ));
            }
        }
    }
    if let Some(line) = parse_m1(f[2]) {
        t.minus_one_checked += 1;
        let (a, b) = (line_for(format, &table, first, -1), index.line(-1));
        if a != line || b != line {
            t.mismatch(format!(
                "lasti -1: got {a:?}/{b:?} want {line:?} (first {first})"
            ));
        }
    }
    t.code_objects += 1;
    t.units += units as u64;
}

fn run_and_check(python: &Path) -> Tally {
    check_dump(&run_dump(python))
}

fn check_dump(dump: &str) -> Tally {
    let mut t = Tally::default();
    let mut lines = dump.lines();
    let header: Vec<u8> = lines
        .next()
        .and_then(|h| h.strip_prefix("V "))
        .expect("header")
        .split(' ')
        .map(|n| n.parse().expect("version"))
        .collect();
    t.version = format!("{}.{}", header[0], header[1]);
    let format = LineTableFormat::for_version(header[0], header[1])
        .unwrap_or_else(|| panic!("no line-table format for {}", t.version));
    for line in lines {
        if let Some(rec) = line.strip_prefix("C ") {
            check_code(format, rec, &mut t);
        } else if let Some(end) = line.strip_prefix("E ") {
            let n: Vec<u64> = end
                .split(' ')
                .map(|n| n.parse().expect("trailer"))
                .collect();
            t.trailer = n.try_into().ok();
        }
    }
    t
}

/// Runs tests/scripts/dump_linetables.py under every CPython the fixture finds and compares
/// the decoded lines with CPython's own per-offset lines. The script takes every 2nd stdlib
/// file (about 35-40k code objects per version); `MLPROF_LINETABLE_STRIDE=1` takes them all.
#[test]
fn line_tables_decode_as_cpython_does_on_the_standard_library() {
    let pythons = fixture::every_build();
    let tallies: Vec<(String, Tally)> = std::thread::scope(|s| {
        let handles: Vec<_> = pythons
            .iter()
            .map(|&py| s.spawn(move || (py.minor.clone(), run_and_check(&py.exe))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("checker thread"))
            .collect()
    });
    let mut failures = Vec::new();
    for (minor, t) in &tallies {
        let [n_code, n_units, x_checked, x_bad] =
            t.trailer.expect("dump trailer (truncated output?)");
        if t.mismatches > 0 || x_bad > 0 || n_code != t.code_objects || n_units != t.units {
            failures.push(format!(
                "{minor}: {} code objects, {} offsets via LineIndex, {} via line_for, {} lasti=-1; \
                 {} mismatches, e.g. {:?}; CPython's own check: {x_bad} of {x_checked} differ",
                t.code_objects,
                t.units,
                t.line_for_checked,
                t.minus_one_checked,
                t.mismatches,
                t.examples
            ));
        }
        assert!(
            t.code_objects > 1000,
            "{minor}: only {} code objects",
            t.code_objects
        );
    }
    assert!(
        failures.is_empty(),
        "line-table decoding differs from CPython:\n{}",
        failures.join("\n")
    );
}
