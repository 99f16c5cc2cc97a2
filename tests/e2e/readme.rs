//! The README's samples against a real run (issue 34): the quick-start report and its hints,
//! written by `scripts/readme_sample.py`, compared by structure with a fresh `mlprof run` of
//! `examples/quickstart.py` (numbers vary from run to run; fields, sections, columns, the
//! script's lines and their source do not). When this fails, the report or the example
//! changed: run `scripts/readme_sample.py` (see its `--help`) and review the README.

use std::path::Path;
use std::process::Stdio;

use crate::fixture;

const SCRIPT: &str = "examples/quickstart.py";

/// The body of the README block `<!-- readme_sample.py: NAME -->` (inside its code fence).
fn block(readme: &str, name: &str) -> Vec<String> {
    let begin = format!("<!-- readme_sample.py: {name} -->\n```\n");
    let start = readme
        .find(&begin)
        .unwrap_or_else(|| panic!("README.md has no block {begin:?}"))
        + begin.len();
    let end = readme[start..]
        .find("\n```\n<!-- /readme_sample.py -->")
        .expect("the block's end")
        + start;
    readme[start..end].lines().map(str::to_string).collect()
}

/// Sections of a report: runs of lines between blank lines, from `mlprof: ` on.
fn sections(lines: &[String]) -> Vec<Vec<String>> {
    let start = lines
        .iter()
        .position(|l| l.starts_with("mlprof: "))
        .expect("a report");
    let mut out = vec![Vec::new()];
    for l in &lines[start..] {
        if l.trim().is_empty() {
            if !out.last().unwrap().is_empty() {
                out.push(Vec::new());
            }
        } else {
            out.last_mut().unwrap().push(l.clone());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// A line with every figure (a number and its unit, a percentage) replaced by `#`, the
/// brackets and punctuation around it kept.
fn masked(line: &str) -> String {
    const UNITS: [&str; 12] = [
        "B/s", "KiB/s", "MiB/s", "GiB/s", "B", "KiB", "MiB", "GiB", "TiB", "ms", "µs", "s",
    ];
    let trail = |w: &str| w[w.trim_end_matches([')', ',', ';']).len()..].to_string();
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        let body = w.trim_start_matches('(');
        let lead = &w[..w.len() - body.len()];
        let figure = body.trim_end_matches([')', ',', ';']);
        let percent = figure.ends_with('%');
        if !figure
            .trim_end_matches('%')
            .parse::<f64>()
            .is_ok_and(f64::is_finite)
        {
            out.push(w.to_string());
            i += 1;
            continue;
        }
        let mut end = trail(body);
        if let Some(unit) = words.get(i + 1).filter(|_| !percent && end.is_empty()) {
            if UNITS.contains(&unit.trim_end_matches([')', ',', ';'])) {
                end = trail(unit);
                i += 1;
            }
        }
        out.push(format!("{lead}#{end}"));
        i += 1;
    }
    out.join(" ")
}

/// The header's field names (`exit`, `wall time`, ...).
fn fields(header: &[String]) -> Vec<String> {
    header[1..]
        .iter()
        .map(|l| l.trim_start().split("  ").next().unwrap().to_string())
        .collect()
}

/// The quick start's table in the `By line` section: (column header, rows: the line's row
/// and its native rows).
fn table(by_line: &[String]) -> (String, Vec<Vec<String>>) {
    let i = by_line
        .iter()
        .position(|l| l.trim().ends_with(SCRIPT))
        .unwrap_or_else(|| panic!("no table of {SCRIPT}: {by_line:#?}"));
    let mut rows: Vec<Vec<String>> = Vec::new();
    for l in &by_line[i + 2..] {
        let first = l.split_whitespace().next().unwrap_or("");
        if !l.starts_with("      ") || !(first.parse::<u32>().is_ok() || first.ends_with('%')) {
            break;
        }
        if first.parse::<u32>().is_ok() {
            rows.push(vec![l.clone()]);
        } else if let Some(row) = rows.last_mut() {
            row.push(l.clone());
        }
    }
    (by_line[i + 1].clone(), rows)
}

/// The line number of a row.
fn line_of(row: &str) -> u32 {
    row.split_whitespace().next().unwrap().parse().unwrap()
}

/// A row's figures up to its footprint, each as its kind: a number, a percentage (or `-`),
/// a unit.
fn shape(row: &str) -> String {
    row.split_whitespace()
        .take(15)
        .map(|t| {
            if t.ends_with('%') || t == "-" {
                'P'
            } else if t.parse::<f64>().is_ok() {
                'N'
            } else {
                'U'
            }
        })
        .collect()
}

/// The line ranges of the functions the script defines (`def` at the start of a line, to the
/// next statement at the start of a line).
fn functions(source: &[&str]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for (i, l) in source.iter().enumerate() {
        if l.starts_with("def ") {
            let end = source[i + 1..]
                .iter()
                .position(|n| !n.is_empty() && !n.starts_with([' ', '\t', '#']))
                .map_or(source.len(), |k| i + 1 + k);
            out.push((i as u32 + 1, end as u32));
        }
    }
    out
}

/// The structure a sample and a real report must share, and the README's rows checked
/// against the real ones and the script's source.
fn compare(sample: &[String], hints: &[String], real: &[String], source: &[&str], what: &str) {
    let (s, r) = (sections(sample), sections(real));
    assert!(
        s[0][0].starts_with("mlprof: ") && s[0][0].ends_with(&format!(" {SCRIPT}")),
        "{what}: {:?}",
        s[0][0]
    );
    assert_eq!(fields(&s[0]), fields(&r[0]), "{what}: the header's fields");
    // Every section of the sample is one of the real report's, in the same order.
    let real_headings: Vec<String> = r.iter().map(|x| masked(&x[0])).collect();
    let mut at = 0;
    for x in &s[1..] {
        let heading = masked(&x[0]);
        let found = real_headings[at..].iter().position(|h| *h == heading);
        at += found.unwrap_or_else(|| {
            panic!("{what}: section {heading:?} is not in a real run's {real_headings:#?}")
        }) + 1;
    }

    let by_line = |secs: &[Vec<String>]| -> Vec<String> {
        secs.iter()
            .find(|x| x[0].starts_with("By line ("))
            .cloned()
            .unwrap_or_else(|| panic!("{what}: no By line section"))
    };
    let (columns, rows) = table(&by_line(&s));
    let (real_columns, real_rows) = table(&by_line(&r));
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(&columns), words(&real_columns), "{what}: the columns");
    // One row per function of the script, each a real row with the script's source.
    let funcs = functions(source);
    assert_eq!(
        rows.len(),
        funcs.len(),
        "{what}: one row per function: {rows:#?}"
    );
    for (row, (first, last)) in rows.iter().zip(&funcs) {
        let n = line_of(&row[0]);
        assert!(
            (*first..=*last).contains(&n),
            "{what}: {n} in {first}..={last}"
        );
        let text = source[n as usize - 1].trim();
        assert!(
            row[0].ends_with(text),
            "{what}: {SCRIPT}:{n} is {text:?}: {row:?}"
        );
        let real = real_rows
            .iter()
            .find(|x| line_of(&x[0]) == n)
            .unwrap_or_else(|| panic!("{what}: line {n} is not in a real run: {real_rows:#?}"));
        assert!(real[0].ends_with(text), "{what}: {real:?}");
        assert_eq!(
            shape(&row[0]),
            shape(&real[0]),
            "{what}: {row:?} vs {real:?}"
        );
        for native in &row[1..] {
            let t: Vec<&str> = native.split_whitespace().collect();
            assert!(
                t.len() >= 3 && t[0].ends_with('%') && native.ends_with(')'),
                "{what}: a native row: {native:?}"
            );
        }
    }

    let held = |secs: &[Vec<String>]| -> Vec<String> {
        secs.iter()
            .find(|x| x[0].starts_with("Held at the peak"))
            .cloned()
            .unwrap_or_else(|| panic!("{what}: no Held section"))
    };
    let place = |l: &String| l.split_whitespace().nth(2).unwrap_or("").to_string();
    let (h, real_h) = (held(&s), held(&r));
    assert_eq!(
        h.get(1).map(place),
        real_h.get(1).map(place),
        "{what}: the line holding most at the peak"
    );
    for row in &h[1..] {
        assert!(
            real_h[1..].iter().any(|x| place(x) == place(row)),
            "{what}: {row:?} in {real_h:#?}"
        );
    }

    // The hints: each of the sample's lines is one of a real run's, figures aside.
    let real_hints = r
        .iter()
        .find(|x| x[0].starts_with("Hints"))
        .unwrap_or_else(|| panic!("{what}: a real run has no hints"));
    let real_masked: Vec<String> = real_hints.iter().map(|l| masked(l)).collect();
    for l in hints {
        assert!(
            real_masked.contains(&masked(l)),
            "{what}: hint line {l:?} not in {real_hints:#?}"
        );
    }
}

#[test]
fn the_quickstart_sample_matches_a_real_run() {
    let root = fixture::root();
    let py = &fixture::numpy_pythons()[0];
    let out = fixture::mlprof()
        .args(["run", "--"])
        .arg(&py.exe)
        .arg(SCRIPT)
        .current_dir(&root)
        .env("NO_COLOR", "1")
        // The README's sample is a 180-column terminal's report.
        .env("COLUMNS", "180")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let real: Vec<String> = stderr.lines().map(str::to_string).collect();
    let source_text = std::fs::read_to_string(root.join(SCRIPT)).unwrap();
    let source: Vec<&str> = source_text.lines().collect();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    compare(
        &block(&readme, "quickstart"),
        &block(&readme, "hints"),
        &real,
        &source,
        "README.md (regenerate it with scripts/readme_sample.py)",
    );

    // The script writes what this test reads: its output from this run passes too.
    let dir = fixture::tempdir();
    let (copy, report) = (dir.join("README.md"), dir.join("report.txt"));
    std::fs::write(&copy, &readme).unwrap();
    std::fs::write(&report, &stderr).unwrap();
    let script = root.join("scripts/readme_sample.py");
    let done = std::process::Command::new(&py.exe)
        .arg(&script)
        .args([Path::new("--report"), &report, Path::new("--readme"), &copy])
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let regenerated = std::fs::read_to_string(&copy).unwrap();
    compare(
        &block(&regenerated, "quickstart"),
        &block(&regenerated, "hints"),
        &real,
        &source,
        "regenerated",
    );
    let outside = |text: &str| {
        let mut t = text.to_string();
        for name in ["quickstart", "hints"] {
            t = t.replace(&block(text, name).join("\n"), "");
        }
        t
    };
    assert_eq!(
        outside(&regenerated),
        outside(&readme),
        "only the blocks change"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn figures_are_masked_and_words_kept() {
    assert_eq!(
        masked("By line (1.24 s sampled in 104 samples; time as shares of it)"),
        "By line (# sampled in # samples; time as shares of it)"
    );
    assert_eq!(
        masked("  peak heap       240.0 MiB at 145 ms"),
        "peak heap # at #"
    );
    assert_eq!(masked("(user 766 ms, kernel 1.2 s)"), "(user #, kernel #)");
    assert_eq!(
        masked("x.T @ (x @ w - 1.0) / len(x)"),
        "x.T @ (x @ w - #) / len(x)"
    );
    assert_eq!(
        masked("holds 228.9 MiB at the peak (95% of it) in float64"),
        "holds # at the peak (# of it) in float64"
    );
}

/// The README names the builds mlprof reads as its layout list has them (the one list the
/// fixture, the scripts and the messages read too).
#[test]
fn the_readme_names_the_builds_of_the_layout_list() {
    use mlprof_pyframes::layouts;
    let readme = std::fs::read_to_string(fixture::root().join("README.md")).unwrap();
    let (lo, hi) = (layouts::oldest().minor, layouts::newest().minor);
    let free = layouts::ALL
        .iter()
        .filter(|l| l.free_threaded)
        .map(|l| l.minor);
    let (tlo, thi) = (free.clone().min().unwrap(), free.max().unwrap());
    for text in [
        format!("CPython 3.{lo}–3.{hi} and the\nfree-threaded 3.{tlo}t–3.{thi}t"),
        format!("every CPython\n3.{lo}–3.{hi}"),
        format!("CPython 3.{lo}–3.{hi} (or a free-threaded 3.{tlo}t–3.{thi}t)"),
    ] {
        assert!(readme.contains(&text), "README.md does not say {text:?}");
    }
}
