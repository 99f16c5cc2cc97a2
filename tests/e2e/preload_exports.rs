//! What the preload library exports is exactly what `preload/exports.map` lists: rustc exports
//! every `#[no_mangle]` item of a cdylib whatever the version script says, so a new one would
//! otherwise be exported (interposing on the program's symbol of that name) unseen.

use std::collections::BTreeSet;
use std::process::Command;

use crate::fixture;

/// The library `mlprof` embeds, as the build left it beside the embedding.
const LIBRARY: &str = concat!(env!("OUT_DIR"), "/libmlprof_preload.so");

/// The names of the version script's `global:` part (comments dropped).
fn listed(script: &str) -> BTreeSet<String> {
    let mut text = String::new();
    let mut rest = script;
    while let Some(start) = rest.find("/*") {
        text.push_str(&rest[..start]);
        let end = rest[start..]
            .find("*/")
            .expect("unclosed comment in exports.map");
        rest = &rest[start + end + 2..];
    }
    text.push_str(rest);
    let global = text
        .split_once("global:")
        .expect("exports.map has no global: part")
        .1;
    let global = global
        .split_once("local:")
        .expect("exports.map has no local: part")
        .0;
    global
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn exports_are_exactly_the_version_scripts_list() {
    let script = std::fs::read_to_string(fixture::root().join("preload/exports.map")).unwrap();
    let want = listed(&script);
    assert!(want.contains("malloc") && want.contains("mlprof_region_begin"));
    assert!(!want.iter().any(|s| s.contains(char::is_whitespace)));
    let out = match Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(LIBRARY)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            fixture::skipped(&format!("skipped: cannot run nm (binutils): {e}"));
            return;
        }
    };
    assert!(
        out.status.success(),
        "nm -D {LIBRARY}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `ADDRESS TYPE NAME`, the name with `@VERSION` or `@@VERSION` when the symbol has one.
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .collect();
    let unlisted: Vec<_> = exported.difference(&want).collect();
    let missing: Vec<_> = want.difference(&exported).collect();
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "exported but not in preload/exports.map: {unlisted:?}; listed but not exported: {missing:?}"
    );
}
