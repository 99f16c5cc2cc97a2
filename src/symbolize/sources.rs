//! Source text of reported lines, read from the files when the profile is made, so that a
//! saved profile renders the same anywhere.

use std::collections::HashMap;

use crate::model::Profile;

/// Longest source line kept (characters).
const MAX_CHARS: usize = 400;

/// Fill `source` of every line whose file can be read.
pub fn attach(profile: &mut Profile) {
    let mut files: HashMap<String, Option<Vec<String>>> = HashMap::new();
    for line in &mut profile.lines {
        let text = files
            .entry(line.file.clone())
            .or_insert_with(|| read_lines(&line.file));
        if let Some(text) = text
            .as_ref()
            .and_then(|t| t.get((line.line as usize).checked_sub(1)?))
        {
            line.source = text.chars().take(MAX_CHARS).collect();
        }
    }
}

fn read_lines(path: &str) -> Option<Vec<String>> {
    if !path.starts_with('/') {
        return None; // <string>, <stdin>, pseudo-files
    }
    let bytes = std::fs::read(path).ok()?;
    Some(
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect(),
    )
}
