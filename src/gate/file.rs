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
//! [gpu-lines]              # bytes of PyTorch tensors a line may hold at the GPU peak
//! "train.py:42" = "4GiB"
//! ```
//!
//! Also (at the top, before any table): `max-copy = "20GiB"` (bytes copied by the tree),
//! `max-cpu = 3600` (CPU seconds of the tree), `ignore = ["tests/*"]` (lines no budget counts),
//! `max-gpu-allocated = "40GiB"` (PyTorch tensors of one process on one device at once).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};
use crate::gate::Budgets;

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

/// Read budgets from `path` (`[tool.mlprof]` of it when it is a `pyproject.toml`).
pub fn load(path: &Path) -> Result<Budgets> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::new(format!("{origin}: {e}")))?;
    let pyproject = path.file_name().is_some_and(|n| n == "pyproject.toml");
    parse_text(&text, &origin, pyproject)
}

/// Budgets from the text of a budget file named `origin`: the whole document, or its
/// `[tool.mlprof]` table for a `pyproject.toml`. Every key is checked: an unknown key or table,
/// a malformed place (`"train.py:88"`, `"model.py::forward"`) or value is an error at its
/// line and column, never skipped (a skipped budget would switch the gate off unseen).
pub fn parse_text(text: &str, origin: &str, pyproject: bool) -> Result<Budgets> {
    let located = |e: toml::de::Error| located(origin, text, &e);
    if pyproject {
        let doc: Pyproject = toml::from_str(text).map_err(located)?;
        match doc.tool.and_then(|t| t.mlprof) {
            Some(table) => Ok(table.0),
            None => Err(Error::new(format!("{origin}: no [tool.mlprof] table"))),
        }
    } else {
        toml::from_str::<Table>(text).map(|t| t.0).map_err(located)
    }
}

fn located(origin: &str, text: &str, e: &toml::de::Error) -> Error {
    let what = e.message().lines().next().unwrap_or("malformed TOML");
    let what = crate::sanitize::clean(what);
    match e.span() {
        Some(span) => {
            let mut start = span.start.min(text.len());
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let before = &text[..start];
            let line = before.matches('\n').count() + 1;
            let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
                .chars()
                .count()
                + 1;
            Error::new(format!("{origin}:{line}:{column}: {what}"))
        }
        None => Error::new(format!("{origin}: {what}")),
    }
}

/// The keys of a budget table, for the message about an unknown one.
const KEYS: &str =
    "max-peak, max-rss, max-leak, max-gpu-memory, max-gpu-reserved, max-gpu-allocated, max-copy, \
     max-cpu, ignore, lines, functions, files, gpu-lines";

/// A `pyproject.toml`: only `[tool.mlprof]` is read, anything else in it is left alone.
#[derive(serde::Deserialize)]
struct Pyproject {
    tool: Option<Tool>,
}

#[derive(serde::Deserialize)]
struct Tool {
    mlprof: Option<Table>,
}

/// A budget table, checked key by key. Errors raised while reading a key or a value carry its
/// span, so the message names its line and column.
struct Table(Budgets);

impl<'de> Deserialize<'de> for Table {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Table, D::Error> {
        d.deserialize_map(TableVisitor)
    }
}

struct TableVisitor;

impl<'de> Visitor<'de> for TableVisitor {
    type Value = Table;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a table of budgets")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Table, A::Error> {
        let mut b = Budgets::default();
        while let Some(key) = map.next_key::<Key>()? {
            let size = |what: &'static str| Size {
                what: what.to_string(),
            };
            match key {
                Key::MaxPeak => b.max_peak_bytes = Some(map.next_value_seed(size("max-peak"))?),
                Key::MaxRss => b.max_rss_bytes = Some(map.next_value_seed(size("max-rss"))?),
                Key::MaxLeak => b.max_leak_bytes = Some(map.next_value_seed(size("max-leak"))?),
                Key::MaxGpuMemory => {
                    b.max_gpu_memory_bytes = Some(map.next_value_seed(size("max-gpu-memory"))?)
                }
                Key::MaxGpuReserved => {
                    b.max_gpu_reserved_bytes = Some(map.next_value_seed(size("max-gpu-reserved"))?)
                }
                Key::MaxGpuAllocated => {
                    b.max_gpu_allocated_bytes =
                        Some(map.next_value_seed(size("max-gpu-allocated"))?)
                }
                Key::MaxCopy => b.max_copy_bytes = Some(map.next_value_seed(size("max-copy"))?),
                Key::MaxCpu => b.max_cpu_s = Some(map.next_value_seed(Seconds)?),
                Key::Ignore => b.ignore = map.next_value_seed(Patterns)?,
                Key::Places(kind) => {
                    let places = map.next_value_seed(Places(kind))?;
                    match kind {
                        Place::Line => b.lines = places,
                        Place::Function => b.functions = places,
                        Place::File => b.files = places,
                        Place::GpuLine => b.gpu_lines = places,
                    }
                }
            }
        }
        Ok(Table(b))
    }
}

/// A key of the budget table.
enum Key {
    MaxPeak,
    MaxRss,
    MaxLeak,
    MaxGpuMemory,
    MaxGpuReserved,
    MaxGpuAllocated,
    MaxCopy,
    MaxCpu,
    Ignore,
    Places(Place),
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a budget key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Key, E> {
                Ok(match v {
                    "max-peak" => Key::MaxPeak,
                    "max-rss" => Key::MaxRss,
                    "max-leak" => Key::MaxLeak,
                    "max-gpu-memory" => Key::MaxGpuMemory,
                    "max-gpu-reserved" => Key::MaxGpuReserved,
                    "max-gpu-allocated" => Key::MaxGpuAllocated,
                    "max-copy" => Key::MaxCopy,
                    "max-cpu" => Key::MaxCpu,
                    "ignore" => Key::Ignore,
                    "lines" => Key::Places(Place::Line),
                    "functions" => Key::Places(Place::Function),
                    "files" => Key::Places(Place::File),
                    "gpu-lines" => Key::Places(Place::GpuLine),
                    other => {
                        return Err(E::custom(format!(
                            "unknown key '{}' ({KEYS})",
                            crate::sanitize::clean(other)
                        )))
                    }
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// What a per-place table limits.
#[derive(Clone, Copy)]
enum Place {
    Line,
    Function,
    File,
    GpuLine,
}

impl Place {
    fn table(self) -> &'static str {
        match self {
            Place::Line => "lines",
            Place::Function => "functions",
            Place::File => "files",
            Place::GpuLine => "gpu-lines",
        }
    }

    /// Whether `key` names a place of this kind: `file.py:88` (a line number from 1),
    /// `file.py::qualname`, or a non-empty file name or path suffix.
    fn check(self, key: &str) -> std::result::Result<(), String> {
        let ok = match self {
            Place::Line | Place::GpuLine => key.rsplit_once(':').is_some_and(|(file, line)| {
                !file.is_empty()
                    && !file.ends_with(':')
                    && line.bytes().all(|c| c.is_ascii_digit())
                    && line.parse::<u32>().is_ok_and(|n| n > 0)
            }),
            Place::Function => key
                .split_once("::")
                .is_some_and(|(file, function)| !file.is_empty() && !function.is_empty()),
            Place::File => !key.trim().is_empty(),
        };
        if ok {
            return Ok(());
        }
        let like = match self {
            Place::Line | Place::GpuLine => "FILE:LINE, like \"train.py:88\"",
            Place::Function => "FILE::FUNCTION, like \"model.py::forward\"",
            Place::File => "a file name or path suffix, like \"data.py\"",
        };
        Err(format!(
            "[{}] key '{}' is not {like}",
            self.table(),
            crate::sanitize::clean(key)
        ))
    }
}

/// A per-place table: `"train.py:88" = "2GiB"`, every key checked.
struct Places(Place);

impl<'de> DeserializeSeed<'de> for Places {
    type Value = BTreeMap<String, u64>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Places {
    type Value = BTreeMap<String, u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.0 {
            Place::Line => f.write_str("[lines] as a table, like \"train.py:88\" = \"2GiB\""),
            Place::Function => {
                f.write_str("[functions] as a table, like \"model.py::forward\" = \"3GiB\"")
            }
            Place::File => f.write_str("[files] as a table, like \"data.py\" = \"1GiB\""),
            Place::GpuLine => {
                f.write_str("[gpu-lines] as a table, like \"train.py:42\" = \"4GiB\"")
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(key) = map.next_key_seed(PlaceKey(self.0))? {
            let what = format!("{}.\"{}\"", self.0.table(), crate::sanitize::clean(&key));
            let bytes = map.next_value_seed(Size { what })?;
            out.insert(key, bytes);
        }
        Ok(out)
    }
}

/// A key of a per-place table, checked as it is read (so an error points at the key).
struct PlaceKey(Place);

impl<'de> DeserializeSeed<'de> for PlaceKey {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<String, D::Error> {
        let key = String::deserialize(d)?;
        self.0.check(&key).map_err(de::Error::custom)?;
        Ok(key)
    }
}

/// A size value: `"2GiB"`, `"50B"` for bytes. A bare number other than 0 is refused, as
/// `--max-peak 50` is (`units::size::parse_limit`): `max-peak = 50` means 50 MiB or GiB far more
/// often than 50 bytes.
struct Size {
    what: String,
}

impl<'de> DeserializeSeed<'de> for Size {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<u64, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Size {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a size like \"2GiB\" for {}", self.what)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<u64, E> {
        crate::units::size::parse_limit(v)
            .map_err(|e| E::custom(format!("{}: {}", self.what, crate::sanitize::clean(&e))))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<u64, E> {
        match v {
            0 => Ok(0),
            _ => Err(E::custom(format!(
                "{}: {v} has no unit: write \"{v}B\" for bytes, or \"{v}MiB\", \"{v}GiB\", \"{v}GB\"",
                self.what
            ))),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<u64, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!(
                "{}: a size cannot be negative",
                self.what
            ))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<u64, E> {
        Err(E::custom(format!(
            "{}: {v} has no unit: write a size like \"{v}GiB\"",
            self.what
        )))
    }
}

/// `max-cpu`: seconds, finite and not negative.
struct Seconds;

impl<'de> DeserializeSeed<'de> for Seconds {
    type Value = f64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<f64, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Seconds {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("seconds for max-cpu, like 120 or 1.5")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<f64, E> {
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(E::custom("max-cpu: expected seconds, like 120 or 1.5"))
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<f64, E> {
        self.visit_f64(v as f64)
    }
}

/// `ignore`: a list of path patterns.
struct Patterns;

impl<'de> DeserializeSeed<'de> for Patterns {
    type Value = Vec<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Vec<String>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Patterns {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("ignore as a list of path patterns, like [\"tests/*\"]")
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        while let Some(Pattern(pattern)) = seq.next_element()? {
            out.push(pattern);
        }
        Ok(out)
    }
}

/// One pattern of `ignore`.
struct Pattern(String);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Pattern, D::Error> {
        struct PatternVisitor;
        impl Visitor<'_> for PatternVisitor {
            type Value = Pattern;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a path pattern (a string, like \"tests/*\") in ignore")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Pattern, E> {
                Ok(Pattern(v.to_string()))
            }
        }
        d.deserialize_str(PatternVisitor)
    }
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
            "max-leak = \"50MiB\"\n[functions]\n\"m.py::f\" = \"1000B\"\n",
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

    fn error(text: &str) -> String {
        parse_text(text, "mlprof.toml", false)
            .unwrap_err()
            .to_string()
    }

    /// A typo in a place key used to be skipped: the gate was off and nobody knew.
    #[test]
    fn typos_in_place_keys_are_errors_at_their_line_and_column() {
        let err = error("max-peak = \"6GiB\"\n[lines]\n\"train.py:88\" = \"1GiB\"\n\"train.py;88\" = \"1GiB\"\n");
        assert_eq!(
            err,
            "mlprof.toml:4:1: [lines] key 'train.py;88' is not FILE:LINE, like \"train.py:88\""
        );
        for key in [
            "train.py",
            "train.py:",
            ":88",
            "train.py:0",
            "train.py:8x",
            "a.py::3",
        ] {
            let err = error(&format!("[lines]\n  \"{key}\" = 1\n"));
            assert!(
                err.starts_with("mlprof.toml:2:3: [lines] key '"),
                "{key}: {err}"
            );
        }
        let err = error("[functions]\n\"model.py:forward\" = \"3GiB\"\n");
        assert!(
            err.starts_with("mlprof.toml:2:1: [functions] key 'model.py:forward' is not"),
            "{err}"
        );
        for key in ["::forward", "model.py::", "forward"] {
            assert!(
                error(&format!("[functions]\n\"{key}\" = 1\n")).contains("[functions] key"),
                "{key}"
            );
        }
        assert!(error("[files]\n\"\" = 1\n").starts_with("mlprof.toml:2:1: [files] key ''"));
        assert_eq!(
            error("[line]\n\"a.py:3\" = 1\n"),
            format!("mlprof.toml:1:2: unknown key 'line' ({KEYS})")
        );
        assert!(error("max-peak = \"1B\"\nmax-pek = 2\n")
            .starts_with("mlprof.toml:2:1: unknown key 'max-pek'"));
        let pyproject = "[tool.black]\nline-length = 99\n[tool.mlprof]\nmax-peak = \"1GiB\"\n[tool.mlprof.functions]\n\"m.py:f\" = 1\n";
        let err = parse_text(pyproject, "pyproject.toml", true)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("pyproject.toml:6:1: [functions] key 'm.py:f'"),
            "{err}"
        );
    }

    #[test]
    fn malformed_values_are_errors_at_the_value() {
        for (text, want) in [
            (
                "[lines]\n\"a.py:3\" = \"lots\"\n",
                "mlprof.toml:2:12: lines.\"a.py:3\": 'lots' is not a size",
            ),
            (
                "[lines]\n\"a.py:3\" = -1\n",
                "mlprof.toml:2:12: lines.\"a.py:3\": a size cannot be negative",
            ),
            (
                "[lines]\n\"a.py:3\" = 1.5\n",
                "mlprof.toml:2:12: lines.\"a.py:3\": 1.5 has no unit",
            ),
            (
                "max-peak = 50\n",
                "mlprof.toml:1:12: max-peak: 50 has no unit: write \"50B\" for bytes, or \"50MiB\"",
            ),
            (
                "max-peak = \"50\"\n",
                "mlprof.toml:1:12: max-peak: '50' has no unit: write 50B for bytes",
            ),
            (
                "lines = 5\n",
                "mlprof.toml:1:9: invalid type: integer `5`, expected [lines] as a table",
            ),
            ("ignore = [\"a/*\", 1]\n", "mlprof.toml:1:"),
            (
                "ignore = \"a/*\"\n",
                "mlprof.toml:1:10: invalid type: string",
            ),
            (
                "max-cpu = nan\n",
                "mlprof.toml:1:11: max-cpu: expected seconds",
            ),
            (
                "max-cpu = -1\n",
                "mlprof.toml:1:11: max-cpu: expected seconds",
            ),
            (
                "max-peak = 1979-05-27T07:32:00Z\n",
                "mlprof.toml:1:12: invalid type",
            ),
            ("[lines.\"a.py:3\"]\nx = 1\n", "mlprof.toml:1:"),
        ] {
            let err = error(text);
            assert!(err.starts_with(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        let err = error("[lines]\n\"\\u001b]0;x\\u0007.py:3\" = \"1\\u001b[2J\"\n");
        assert!(!err.contains('\x1b') && err.contains("\\x1b"), "{err}");
        let ok = parse_text(
            "max-cpu = 12\nmax-copy = \"1G\"\nmax-gpu-reserved = \"2GiB\"\nignore = [\"t/*\"]\n[files]\n\"d.py\" = \"1B\"\n[lines]\n\"a.py:3\" = \"7B\"\n",
            "mlprof.toml",
            false,
        )
        .unwrap();
        assert_eq!(ok.max_gpu_reserved_bytes, Some(2 << 30));
        assert_eq!(
            (
                ok.max_cpu_s,
                ok.max_copy_bytes,
                ok.ignore,
                ok.files["d.py"],
                ok.lines["a.py:3"]
            ),
            (Some(12.0), Some(1 << 30), vec!["t/*".to_string()], 1, 7)
        );
    }

    /// Random bytes and mutations of valid files: the parser (and the size parser under it)
    /// returns budgets or a one-line error naming the file, never panics (the binary aborts on
    /// a panic), never prints a control character.
    #[test]
    fn fuzzed_budget_files_give_budgets_or_one_line_errors() {
        const SEEDS: [&str; 4] = [
            "max-peak = \"6GiB\"\nmax-rss = \"8GiB\"\nmax-leak = \"50MiB\"\nmax-gpu-memory = \"1000B\"\nmax-copy = \"20GiB\"\nmax-cpu = 3600\nignore = [\"tests/*\", \"*/site-packages/*\"]\n[lines]\n\"train.py:88\" = \"2GiB\"\n[functions]\n\"model.py::forward\" = \"3GiB\"\n[files]\n\"data.py\" = \"1GiB\"\n",
            "[tool.black]\nline-length = 99\n[tool.mlprof]\nmax-peak = \"1.5G\"\n[tool.mlprof.lines]\n\"a.py:3\" = \"512B\"\n",
            "lines = { \"x.py:1\" = \"1k\", \"y.py:2\" = \"2 MB\" }\nfunctions = { \"z.py::C.m\" = \"7B\" }\nmax-cpu = 1.5e3\n",
            "# comment\n'max-peak' = '2gib'\n[\"lines\"]\n'é.py:9' = \"3t\"\n",
        ];
        const BYTES: &[u8] = b"=[]{}:.,\"'#\\\n \t0123456789-+eEkKmMgGiIbB*abc\x1b\x00\x7f";
        let mut rng = crate::test_rng::Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: usize| rng.below(n.max(1) as u64) as usize;
        let mut parsed = 0;
        let mut check = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            for (origin, pyproject) in [("mlprof.toml", false), ("pyproject.toml", true)] {
                let result = parse_text(&text, origin, pyproject);
                parsed += usize::from(result.is_ok());
                if let Err(e) = result {
                    let e = e.to_string();
                    assert!(e.starts_with(origin), "{text:?}: {e}");
                    assert!(!e.chars().any(char::is_control), "{text:?}: {e:?}");
                }
            }
        };
        for case in 0..20_000 {
            let bytes: Vec<u8> = if case % 4 == 0 {
                (0..next(120))
                    .map(|_| {
                        if next(2) == 0 {
                            next(256) as u8
                        } else {
                            BYTES[next(BYTES.len())]
                        }
                    })
                    .collect()
            } else {
                let mut b = SEEDS[next(SEEDS.len())].as_bytes().to_vec();
                for _ in 0..1 + next(4) {
                    let at = next(b.len() + 1);
                    match next(5) {
                        0 if at < b.len() => b[at] = BYTES[next(BYTES.len())],
                        1 => b.insert(at, BYTES[next(BYTES.len())]),
                        2 if at < b.len() => {
                            let end = (at + 1 + next(12)).min(b.len());
                            b.drain(at..end);
                        }
                        3 if at < b.len() => {
                            let end = (at + 1 + next(24)).min(b.len());
                            let piece = b[at..end].to_vec();
                            let to = next(b.len() + 1);
                            b.splice(to..to, piece);
                        }
                        _ if at < b.len() => b[at] = next(256) as u8,
                        _ => b.push(next(256) as u8),
                    }
                }
                b
            };
            check(&bytes);
        }
        assert!(
            parsed > 1000,
            "mutations still reach past the TOML parser: {parsed}"
        );
    }
}
