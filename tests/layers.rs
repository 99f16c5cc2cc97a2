//! The collector's data flows one way: every module of `src/` imports only earlier stages and
//! the leaves, and `docs/ARCHITECTURE.md`'s stage table says exactly that. Reads the sources
//! (every `crate::` path, tests included) and the table; fails naming the offending file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules any stage may use; they import no stage.
const LEAVES: [&str; 5] = ["error", "sanitize", "test_rng", "test_skip", "units"];

/// The stages in data-flow order: each may import only the ones before it.
const STAGES: [&str; 11] = [
    "recording",
    "launch",
    "collect",
    "symbolize",
    "model",
    "annotate",
    "gate",
    "pipeline",
    "render",
    "cli",
    "fuzz_tests",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for the crate roots).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root().join("src")).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The source without comments (a `//` inside a string literal cuts the line short; no
/// `crate::` path sits behind one in this code base).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// Every top-level module named by a `crate::` path: `crate::model::Profile`,
/// `crate::{collect, launch}`, `crate::{model::{A, B}, render}`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        out.insert(ident(&group[start..i]));
                        start = i + 1;
                        if c == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty() && m != "self");
    out
}

/// What a module must not import: every later stage (for a leaf, every stage).
fn forbidden(module: &str) -> BTreeSet<String> {
    match STAGES.iter().position(|s| *s == module) {
        Some(i) => STAGES[i + 1..].iter().map(|s| s.to_string()).collect(),
        None => STAGES.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn every_top_level_module_is_a_stage_or_a_leaf() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let known: BTreeSet<String> = STAGES
        .iter()
        .chain(LEAVES.iter())
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        modules, known,
        "src/ has modules that are neither a stage nor a leaf (or lost one): add it to STAGES \
         or LEAVES here and to docs/ARCHITECTURE.md's stage table"
    );
}

#[test]
fn no_module_imports_a_later_stage() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut offences = Vec::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        let bad = forbidden(&module);
        for import in imports(&code_of(&text)) {
            if bad.contains(&import) {
                let rel = file.strip_prefix(root()).unwrap_or(file);
                offences.push(format!("{} ({module}) imports {import}", rel.display()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "imports against the data flow:\n{}",
        offences.join("\n")
    );
}

/// The rows of ARCHITECTURE.md's stage table: module -> the modules it must not import.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("read doc");
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(|s| s.trim_end_matches('/').to_owned())
            .collect()
    };
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with('|') && line.contains("must not import") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("| ---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        let (first, last) = (cells[0], cells[cells.len() - 1]);
        let not: BTreeSet<String> = if last.contains("any stage") {
            STAGES.iter().map(|s| s.to_string()).collect()
        } else {
            ticked(last).into_iter().collect()
        };
        for module in ticked(first) {
            rows.insert(module, not.clone());
        }
    }
    rows
}

#[test]
fn architecture_doc_states_the_same_rule() {
    let rows = documented();
    let mut want = BTreeMap::new();
    for m in STAGES
        .iter()
        .chain(LEAVES.iter().filter(|l| !l.starts_with("test_")))
    {
        want.insert(m.to_string(), forbidden(m));
    }
    assert_eq!(
        rows, want,
        "docs/ARCHITECTURE.md's stage table (columns: stage ... | must not import) disagrees \
         with the stages this test enforces"
    );
}

#[test]
fn the_import_reader_sees_every_form() {
    let code = code_of(
        "use crate::model::Profile;\nuse crate::{collect, launch::{A, B}, self};\n\
         // use crate::render;\nfn f() { crate::gate::check(); }\n",
    );
    let got: Vec<String> = imports(&code).into_iter().collect();
    assert_eq!(got, ["collect", "gate", "launch", "model"]);
}
