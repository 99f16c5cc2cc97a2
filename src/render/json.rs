//! The JSON profile (schema in `docs/profile-schema.md`), and reading it back.
//!
//! A saved profile is read with memory in proportion to what it holds: streamed twice from the
//! file (a first pass checks the schema and adds up its integers without building anything,
//! the second deserialises the model directly), never held as text or as a `serde_json::Value`.

use std::io::{BufReader, Read, Seek};
use std::path::Path;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};
use crate::model::{invariants, Profile, SCHEMA};

/// Largest profile file read: 2 GiB. A real run writes far less (a day-long run with every
/// line of a large codebase is some hundreds of MB); a larger file is refused with one line
/// instead of exhausting memory.
pub const MAX_PROFILE_BYTES: u64 = 2 << 30;

/// Serialise a profile, pretty-printed.
pub fn render(profile: &Profile) -> Result<String> {
    let mut text = serde_json::to_string_pretty(profile)
        .map_err(|e| Error::new(format!("cannot serialise the profile: {e}")))?;
    text.push('\n');
    Ok(text)
}

/// Parse and check a profile; errors name `origin` and the problem in one line.
pub fn parse(text: &str, origin: &str) -> Result<Profile> {
    let bytes = text.as_bytes();
    check(scan(serde_json::Deserializer::from_slice(bytes)), origin)?;
    finish(serde_json::from_slice(bytes), origin)
}

/// Read, parse and check the profile in file `path` (errors name `origin`), with memory in
/// proportion to the profile, not to its text: a regular file is streamed twice; a pipe or
/// other stream is read into memory first (at most [`MAX_PROFILE_BYTES`]).
/// `reason` words an I/O error.
pub fn read(path: &Path, origin: &str, reason: fn(&std::io::Error) -> String) -> Result<Profile> {
    let io = |e: std::io::Error| Error::new(format!("{origin}: {}", reason(&e)));
    let mut file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let too_big = |size: String| {
        Error::new(format!(
            "{origin}: {size}, larger than any profile mlprof reads ({MAX_PROFILE_BYTES} bytes \
             at most)"
        ))
    };
    if meta.is_dir() {
        return Err(Error::new(format!("{origin}: Is a directory")));
    }
    if !meta.is_file() {
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_PROFILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() as u64 > MAX_PROFILE_BYTES {
            return Err(too_big(format!("more than {MAX_PROFILE_BYTES} bytes")));
        }
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| Error::new(format!("{origin}: not a JSON profile (not UTF-8: {e})")))?;
        return parse(text, origin);
    }
    if meta.len() > MAX_PROFILE_BYTES {
        return Err(too_big(format!("{} bytes", meta.len())));
    }
    // The file may grow between the passes: neither reads past the cap.
    check(
        scan(serde_json::Deserializer::from_reader(reader(&file))),
        origin,
    )?;
    file.rewind().map_err(io)?;
    finish(serde_json::from_reader(reader(&file)), origin)
}

/// A buffered reader of `file` that stops at [`MAX_PROFILE_BYTES`].
fn reader(file: &std::fs::File) -> BufReader<std::io::Take<&std::fs::File>> {
    BufReader::with_capacity(1 << 16, file.take(MAX_PROFILE_BYTES))
}

/// What the first pass found: the `schema` field (if a string) and the sum of the magnitudes
/// of every integer.
#[derive(Default)]
struct Scanned {
    schema: Option<String>,
    total: u128,
}

/// The first pass over a profile's text: checks it is JSON, keeps its `schema` and adds up its
/// integers, holding nothing else.
fn scan<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
) -> serde_json::Result<Scanned> {
    let mut out = Scanned::default();
    Walk {
        out: &mut out,
        top: true,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// Check what [`scan`] found.
fn check(scanned: serde_json::Result<Scanned>, origin: &str) -> Result<()> {
    let scanned = scanned.map_err(|e| Error::new(format!("{origin}: not a JSON profile ({e})")))?;
    match scanned.schema.as_deref() {
        Some(SCHEMA) => {}
        Some(other) => {
            return Err(Error::new(format!(
                "{origin}: profile schema {other:?} is not supported (this mlprof reads {SCHEMA:?})"
            )))
        }
        None => {
            return Err(Error::new(format!(
                "{origin}: not an mlprof profile (no \"schema\" field)"
            )))
        }
    }
    // A saved profile is untrusted input: whatever a reader adds up must not overflow.
    let total = scanned.total;
    if total > MAX_INTEGER_TOTAL {
        return Err(Error::new(format!(
            "{origin}: implausible profile: its integers add up to {total}, beyond what any \
             run produces"
        )));
    }
    Ok(())
}

/// Check the deserialised profile.
fn finish(profile: serde_json::Result<Profile>, origin: &str) -> Result<Profile> {
    let profile = profile.map_err(|e| Error::new(format!("{origin}: corrupt profile: {e}")))?;
    if let Some(problem) = invariants::violations(&profile).first() {
        return Err(Error::new(format!(
            "{origin}: inconsistent profile: {problem}"
        )));
    }
    Ok(profile)
}

/// Largest sum of every integer in a profile (their magnitudes): a real profile is far below,
/// and then any sum a reader computes over its counts and byte sizes fits in `u64` and `i64`.
const MAX_INTEGER_TOTAL: u128 = i64::MAX as u128;

/// One JSON value walked by [`scan`] (nesting is bounded by the parser's recursion limit).
struct Walk<'a> {
    out: &'a mut Scanned,
    /// The top-level value: its `schema` field is kept.
    top: bool,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// The value of the top-level `schema` field: kept if a string, else walked.
struct Schema<'a>(&'a mut Scanned);

impl<'de> DeserializeSeed<'de> for Schema<'_> {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Schema<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Option<String>, E> {
        Ok(Some(v.to_owned()))
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<Option<String>, E> {
        self.0.total += u128::from(v);
        Ok(None)
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<Option<String>, E> {
        self.0.total += u128::from(v.unsigned_abs());
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> std::result::Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> std::result::Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Option<String>, A::Error> {
        Walk {
            out: self.0,
            top: false,
        }
        .visit_seq(seq)
        .map(|_| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Option<String>, A::Error> {
        Walk {
            out: self.0,
            top: false,
        }
        .visit_map(map)
        .map(|_| None)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<(), E> {
        self.out.total += u128::from(v);
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<(), E> {
        self.out.total += u128::from(v.unsigned_abs());
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while seq
            .next_element_seed(Walk {
                out: &mut *self.out,
                top: false,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            if self.top && key.0 {
                let schema = map.next_value_seed(Schema(&mut *self.out))?;
                self.out.schema = schema;
            } else {
                map.next_value_seed(Walk {
                    out: &mut *self.out,
                    top: false,
                })?;
            }
        }
        Ok(())
    }
}

/// An object's key: whether it is `schema` (nothing else is kept).
struct Key(bool);

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Key, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }

            fn visit_str<E>(self, v: &str) -> std::result::Result<Key, E> {
                Ok(Key(v == "schema"))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage_with_one_line() {
        let p = Profile {
            schema: SCHEMA.into(),
            command: vec!["python3".into()],
            ..Profile::default()
        };
        let text = render(&p).unwrap();
        assert_eq!(parse(&text, "p.json").unwrap(), p);
        for (bad, expect) in [
            (&text[..text.len() / 2], "not a JSON profile"),
            ("{\"schema\": \"other/9\"}", "not supported"),
            ("[1, 2]", "no \"schema\""),
            (
                "{\"schema\": \"mlprof/1\", \"command\": 3}",
                "corrupt profile",
            ),
            (
                "{\"schema\": \"mlprof/1\", \"a\": [9223372036854775807, 1]}",
                "implausible profile",
            ),
        ] {
            let err = parse(bad, "p.json").unwrap_err().to_string();
            assert!(err.starts_with("p.json: ") && err.contains(expect), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        let err = parse("{\"schema\": [1, {\"schema\": \"mlprof/1\"}]}", "p.json").unwrap_err();
        assert!(err.to_string().contains("no \"schema\""), "{err}");
    }

    #[test]
    fn files_are_read_as_text_is_parsed() {
        fn reason(e: &std::io::Error) -> String {
            e.kind().to_string()
        }
        let dir = std::env::temp_dir().join(format!("mlprof-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = Profile {
            schema: SCHEMA.into(),
            command: vec!["python3".into(), "t.py".into()],
            ..Profile::default()
        };
        let file = dir.join("p.json");
        std::fs::write(&file, render(&p).unwrap()).unwrap();
        assert_eq!(read(&file, "p.json", reason).unwrap(), p);
        std::fs::write(&file, "{\"schema\": \"mlprof/1\"} x").unwrap();
        let err = read(&file, "p.json", reason).unwrap_err().to_string();
        assert!(err.starts_with("p.json: not a JSON profile"), "{err}");
        let err = read(&dir, "d", reason).unwrap_err().to_string();
        assert_eq!(err, "d: Is a directory");
        let err = read(&dir.join("none"), "n", reason)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "n: entity not found");
        // Not a regular file: read into memory, up to the cap.
        assert_eq!(
            read(Path::new("/dev/null"), "null", reason)
                .unwrap_err()
                .to_string(),
            "null: not a JSON profile (EOF while parsing a value at line 1 column 0)"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
