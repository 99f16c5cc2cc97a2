//! Budget files: `mlprof.toml`, or `[tool.mlprof]` in `pyproject.toml`, found from the working
//! directory upward, or named with `--budget FILE`. Sizes as people write them. A malformed
//! file is an error naming the file, line and column.
//!
//! ```toml
//! max-peak = "6GiB"        # the process tree's peak heap
//! max-rss = "8GiB"
//! max-leak = "50MiB"       # held at the end by lines flagged as likely leaks
//! [lines]                  # bytes a line may hold at the heap peak
//! "train.py:88" = "2GiB"
//! [functions]              # bytes a function's lines may hold at the peak
//! "model.py::forward" = "3GiB"
//! [files]
//! "data.py" = "1GiB"
//! ```
//!
//! Also (at the top, before any table): `max-copy = "20GiB"` (bytes copied by the tree),
//! `max-cpu = 3600` (CPU seconds of the tree), `ignore = ["tests/*"]` (lines no budget counts).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::budget::Budgets;
use crate::error::{Error, Result};

/// Find the budget file for `--budget` without a path: `mlprof.toml`, or a `pyproject.toml`
/// with a `[tool.mlprof]` table, in `start` or a parent directory.
pub fn discover(start: &Path) -> Result<PathBuf> {
    for dir in start.ancestors() {
        let own = dir.join("mlprof.toml");
        if own.is_file() {
            return Ok(own);
        }
        let project = dir.join("pyproject.toml");
        if project.is_file()
            && std::fs::read_to_string(&project).is_ok_and(|t| t.contains("[tool.mlprof"))
        {
            return Ok(project);
        }
    }
    Err(Error::new(format!(
        "--budget: no mlprof.toml or pyproject.toml with [tool.mlprof] in {} or above",
        start.display()
    )))
}

/// Read budgets from `path`.
pub fn load(path: &Path) -> Result<Budgets> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::new(format!("{origin}: {e}")))?;
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| located(&origin, &text, &e))?;
    let table = if path.file_name().is_some_and(|n| n == "pyproject.toml") {
        match doc.get("tool").and_then(|t| t.get("mlprof")) {
            Some(toml::Value::Table(t)) => t.clone(),
            _ => return Err(Error::new(format!("{origin}: no [tool.mlprof] table"))),
        }
    } else {
        doc
    };
    parse(&table).map_err(|m| Error::new(format!("{origin}: {m}")))
}

fn located(origin: &str, text: &str, e: &toml::de::Error) -> Error {
    let (line, column) = match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            (
                line,
                before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1,
            )
        }
        None => (0, 0),
    };
    let what = e.message().lines().next().unwrap_or("malformed TOML");
    Error::new(format!("{origin}:{line}:{column}: {what}"))
}

fn parse(t: &toml::Table) -> std::result::Result<Budgets, String> {
    let mut b = Budgets::default();
    for (key, value) in t {
        match key.as_str() {
            "max-peak" => b.max_peak_bytes = Some(size(key, value)?),
            "max-rss" => b.max_rss_bytes = Some(size(key, value)?),
            "max-gpu-memory" => b.max_gpu_memory_bytes = Some(size(key, value)?),
            "max-leak" => b.max_leak_bytes = Some(size(key, value)?),
            "lines" => b.lines = sizes(key, value)?,
            "functions" => b.functions = sizes(key, value)?,
            "files" => b.files = sizes(key, value)?,
            "max-copy" => b.max_copy_bytes = Some(size(key, value)?),
            "max-cpu" => b.max_cpu_s = Some(seconds(key, value)?),
            "ignore" => b.ignore = strings(key, value)?,
            other => {
                return Err(format!(
                    "unknown key '{other}' (max-peak, max-rss, max-leak, max-gpu-memory, max-copy, max-cpu, lines, functions, files, ignore)"
                ))
            }
        }
    }
    Ok(b)
}

fn size(key: &str, value: &toml::Value) -> std::result::Result<u64, String> {
    match value {
        toml::Value::String(s) => crate::size::parse(s).map_err(|e| format!("{key}: {e}")),
        toml::Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        _ => Err(format!("{key}: expected a size like \"2GiB\"")),
    }
}

fn seconds(key: &str, value: &toml::Value) -> std::result::Result<f64, String> {
    match value {
        toml::Value::Float(f) if *f >= 0.0 => Ok(*f),
        toml::Value::Integer(n) if *n >= 0 => Ok(*n as f64),
        _ => Err(format!("{key}: expected seconds, like 120 or 1.5")),
    }
}

fn strings(key: &str, value: &toml::Value) -> std::result::Result<Vec<String>, String> {
    let toml::Value::Array(items) = value else {
        return Err(format!("{key}: expected a list of patterns"));
    };
    items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{key}: patterns are strings"))
        })
        .collect()
}

fn sizes(key: &str, value: &toml::Value) -> std::result::Result<BTreeMap<String, u64>, String> {
    let toml::Value::Table(t) = value else {
        return Err(format!("[{key}] must be a table"));
    };
    t.iter()
        .map(|(k, v)| Ok((k.clone(), size(&format!("{key}.\"{k}\""), v)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn files_are_found_upward_and_parsed() {
        let root = std::env::temp_dir().join(format!("mlprof-budget-{}", std::process::id()));
        let deep = root.join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        write(
            &root,
            "pyproject.toml",
            "[tool.mlprof]\nmax-peak = \"6GiB\"\n[tool.mlprof.lines]\n\"train.py:88\" = \"1GiB\"\n",
        );
        let found = discover(&deep).unwrap();
        assert_eq!(found, root.join("pyproject.toml"));
        let b = load(&found).unwrap();
        assert_eq!(b.max_peak_bytes, Some(6 << 30));
        assert_eq!(b.lines["train.py:88"], 1 << 30);
        write(
            &root.join("a"),
            "mlprof.toml",
            "max-leak = \"50MiB\"\n[functions]\n\"m.py::f\" = 1000\n",
        );
        let b = load(&discover(&deep).unwrap()).unwrap();
        assert_eq!(
            (b.max_leak_bytes, b.functions["m.py::f"]),
            (Some(50 << 20), 1000)
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn malformed_files_name_file_line_and_column() {
        let dir = std::env::temp_dir().join(format!("mlprof-budget-bad-{}", std::process::id()));
        let bad = write(&dir, "mlprof.toml", "max-peak = \"6GiB\"\nmax-rss = = 3\n");
        let err = load(&bad).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:2:", bad.display())), "{err}");
        let unknown = write(&dir, "mlprof.toml", "max-heap = \"1GiB\"\n");
        assert!(load(&unknown)
            .unwrap_err()
            .to_string()
            .contains("unknown key 'max-heap'"));
        let size = write(&dir, "mlprof.toml", "max-peak = \"lots\"\n");
        assert!(load(&size)
            .unwrap_err()
            .to_string()
            .contains("max-peak: 'lots' is not a size"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
