//! The collector's data flows one way: every module of `src/` imports only earlier stages and
//! the leaves, and `docs/ARCHITECTURE.md`'s stage table says exactly that. Reads the sources
//! (every `crate::` path, and every `super::super::…` path that reaches the crate root, tests
//! included; comments and literals left out) and the table; fails naming the offending file.

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

/// The module a file of `src/` is, as its path from the crate root: `["collect", "decode"]` for
/// `src/collect/decode.rs`, `["collect"]` for `src/collect/mod.rs` (`None` for the crate roots).
fn module_path(path: &Path) -> Option<Vec<String>> {
    let rel = path.strip_prefix(root().join("src")).ok()?;
    let mut names: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_str().map(str::to_owned))
        .collect::<Option<_>>()?;
    let last = names.pop()?;
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    if stem != "mod" {
        names.push(stem.to_owned());
    }
    let top = names.first()?;
    (!matches!(top.as_str(), "lib" | "main")).then_some(names)
}

/// The top-level module a file of `src/` belongs to (`None` for the crate roots).
fn module_of(path: &Path) -> Option<String> {
    module_path(path)?.into_iter().next()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The source as code only: comments (`//` to the end of the line, nested `/* */`) and the
/// contents of string, raw string and character literals blanked, newlines kept. A `//` inside
/// a string (`"http://..."`) is text and hides nothing after it, and a `crate::` or a brace
/// inside one is no path and no block.
fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(c) = at(i) {
        let starts_word = i == 0 || !is_ident(chars[i - 1]);
        if c == '/' && at(i + 1) == Some('/') {
            while at(i).is_some_and(|c| c != '\n') {
                i += 1;
            }
            continue;
        }
        if c == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while let Some(c) = at(i) {
                if c == '/' && at(i + 1) == Some('*') {
                    (depth, i) = (depth + 1, i + 2);
                } else if c == '*' && at(i + 1) == Some('/') {
                    (depth, i) = (depth - 1, i + 2);
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c));
                    i += 1;
                }
            }
            out.push(' ');
            continue;
        }
        // Raw strings: r"…", r#"…"#, br"…" (not `r#ident`, not the end of an identifier).
        if starts_word && (c == 'r' || (c == 'b' && at(i + 1) == Some('r'))) {
            let open = if c == 'b' { i + 2 } else { i + 1 };
            let mut quote = open;
            while at(quote) == Some('#') {
                quote += 1;
            }
            if at(quote) == Some('"') {
                let hashes = quote - open;
                out.extend(&chars[i..=quote]);
                i = quote + 1;
                while let Some(c) = at(i) {
                    if c == '"' && (1..=hashes).all(|h| at(i + h) == Some('#')) {
                        out.extend(&chars[i..=i + hashes]);
                        i += 1 + hashes;
                        break;
                    }
                    out.push(blank(c));
                    i += 1;
                }
                continue;
            }
        }
        if c == '"' {
            out.push('"');
            i += 1;
            while let Some(c) = at(i) {
                i += 1;
                match c {
                    '"' => {
                        out.push('"');
                        break;
                    }
                    '\\' => {
                        out.push(' ');
                        if let Some(escaped) = at(i) {
                            out.push(blank(escaped));
                            i += 1;
                        }
                    }
                    c => out.push(blank(c)),
                }
            }
            continue;
        }
        // A character literal ('x', '"', '\'', '\u{1F600}'); otherwise a lifetime or a label.
        if c == '\'' {
            let end = if at(i + 1) == Some('\\') {
                (i + 3..chars.len()).find(|&j| chars[j] == '\'')
            } else {
                (at(i + 2) == Some('\'')).then_some(i + 2)
            };
            if let Some(end) = end {
                out.push_str("' '");
                i = end + 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Whether the code before a `{` is `mod NAME`: the brace opens an inline module.
fn opens_mod(before: &str) -> bool {
    let before = before.trim_end();
    let unnamed = before.trim_end_matches(is_ident);
    if unnamed.len() == before.len() {
        return false;
    }
    unnamed
        .trim_end()
        .strip_suffix("mod")
        .is_some_and(|rest| !rest.ends_with(is_ident))
}

/// The top-level modules a path names after its root (`crate::`, or the `super::` that reaches
/// the crate root): `model::Profile` → `model`, `{collect, launch::{A, B}, self}` → `collect`,
/// `launch`.
fn roots_named(rest: &str, out: &mut BTreeSet<String>) {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|&c| is_ident(c))
            .collect()
    };
    let Some(group) = rest.trim_start().strip_prefix('{') else {
        out.insert(ident(rest));
        return;
    };
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
}

/// Every top-level module that `code` (made by [`code_of`]), the text of the module at `path`
/// (see [`module_path`]), names by path: a `crate::` path, and a `super::super::…` path that
/// climbs to the crate root, counting the file's place and the inline `mod NAME { … }` blocks
/// around it (`super::super::render::x` in `collect/decode.rs`, or in a `mod tests` block of
/// `collect/mod.rs`, is `crate::render::x`). A `super::` inside a `use` group
/// (`use super::{super::x}`) is not followed: no code here writes one.
fn imports(path: &[String], code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut depth = 0usize;
    // Brace depth at which each enclosing inline module opened.
    let mut mods: Vec<usize> = Vec::new();
    let mut prev = ' ';
    for (at, c) in code.char_indices() {
        let rest = &code[at..];
        match c {
            '{' => {
                if opens_mod(&code[..at]) {
                    mods.push(depth);
                }
                depth += 1;
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if mods.last() == Some(&depth) {
                    mods.pop();
                }
            }
            _ if is_ident(prev) || prev == ':' => {}
            _ if rest.starts_with("crate::") => roots_named(&rest["crate::".len()..], &mut out),
            _ if rest.starts_with("super::") => {
                let mut after = rest;
                let mut up = 0;
                while let Some(r) = after.strip_prefix("super::") {
                    (after, up) = (r.trim_start(), up + 1);
                }
                if up == path.len() + mods.len() {
                    roots_named(after, &mut out);
                }
            }
            _ => {}
        }
        prev = c;
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
        let Some(path) = module_path(file) else {
            continue;
        };
        let module = path[0].clone();
        let text = std::fs::read_to_string(file).expect("read source");
        let bad = forbidden(&module);
        for import in imports(&path, &code_of(&text)) {
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

/// The imports `imports` reads in `source`, as the text of the module at `path`.
fn read(path: &[&str], source: &str) -> Vec<String> {
    let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
    imports(&path, &code_of(source)).into_iter().collect()
}

#[test]
fn the_import_reader_sees_every_form() {
    let got = read(
        &["cli"],
        "use crate::model::Profile;\nuse crate::{collect, launch::{A, B}, self};\n\
         // use crate::render;\nfn f() { crate::gate::check(); }\n",
    );
    assert_eq!(got, ["collect", "gate", "launch", "model"]);
}

#[test]
fn super_paths_that_reach_the_crate_root_are_imports() {
    // From a file one level down, `super::super::` is the crate root; `super::` is its own
    // stage.
    let decode = ["collect", "decode"];
    assert_eq!(
        read(&decode, "use super::super::render::text;\n"),
        ["render"]
    );
    assert_eq!(
        read(&decode, "fn f() { super::super::gate::check(); }"),
        ["gate"]
    );
    assert_eq!(
        read(&decode, "use super::super::{cli, model::{A, B}};\n"),
        ["cli", "model"]
    );
    assert!(read(&decode, "use super::events::Decoded;\nuse super::*;\n").is_empty());
    // In a stage's `mod.rs` a `super::` is the root already; an inline module is a level more.
    assert_eq!(
        read(&["collect"], "use super::model::Profile;\n"),
        ["model"]
    );
    let nested = "mod tests {\n    use super::super::model;\n    use super::waits;\n}\n\
                  fn f() { super::super::render::x(); }\n";
    assert_eq!(
        read(&["collect"], nested),
        ["model"],
        "the second `super::super` is outside the block: above the root, not a path"
    );
    assert_eq!(
        read(
            &decode,
            "#[cfg(test)]\npub(crate) mod tests {\n    use super::super::super::cli;\n}\n"
        ),
        ["cli"]
    );
    // `crate::` and `super::` only where a path starts.
    assert!(read(
        &decode,
        "let a = mycrate::model::x; let b = x::super::render::y;"
    )
    .is_empty());
}

#[test]
fn comments_are_left_out_and_strings_hide_nothing() {
    let got = read(
        &["cli"],
        "let url = \"http://example.com\"; use crate::render::html;\n\
         let quote = '\"'; use crate::gate;\n\
         let raw = r#\"a \" // b\"#; use crate::model;\n\
         let s = \"crate::collect and { unbalanced\"; /* crate::launch /* nested */ */\n\
         let c = '{'; let e = '\\''; fn f<'a>(x: &'a str) { crate::annotate::f(); }\n",
    );
    assert_eq!(got, ["annotate", "gate", "model", "render"]);
    let code = code_of("a // crate::cli \"\nb /* x\n y */ c \"// kept\" 'q'");
    let words: Vec<&str> = code.split_whitespace().collect();
    assert_eq!(words, ["a", "b", "c", "\"", "\"", "'", "'"], "{code:?}");
    assert_eq!(code.lines().count(), 3, "newlines kept: {code:?}");
}

#[test]
fn a_closing_brace_in_a_string_does_not_end_a_module_block() {
    let source = "mod tests {\n    const S: &str = \"}\";\n    use super::super::render;\n}\n";
    assert_eq!(read(&["collect"], source), ["render"]);
}
