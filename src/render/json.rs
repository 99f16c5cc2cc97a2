//! The JSON profile (schema in `docs/profile-schema.md`), and reading it back.

use crate::error::{Error, Result};
use crate::model::{invariants, Profile, SCHEMA};

/// Serialise a profile, pretty-printed.
pub fn render(profile: &Profile) -> Result<String> {
    let mut text = serde_json::to_string_pretty(profile)
        .map_err(|e| Error::new(format!("cannot serialise the profile: {e}")))?;
    text.push('\n');
    Ok(text)
}

/// Parse and check a profile; errors name `origin` and the problem in one line.
pub fn parse(text: &str, origin: &str) -> Result<Profile> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Error::new(format!("{origin}: not a JSON profile ({e})")))?;
    match value.get("schema").and_then(|s| s.as_str()) {
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
    let mut total = 0u128;
    integer_total(&value, &mut total);
    if total > MAX_INTEGER_TOTAL {
        return Err(Error::new(format!(
            "{origin}: implausible profile: its integers add up to {total}, beyond what any \
             run produces"
        )));
    }
    let profile: Profile = serde_json::from_value(value)
        .map_err(|e| Error::new(format!("{origin}: corrupt profile: {e}")))?;
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

/// Add the magnitude of every integer in `value` to `total` (nesting is bounded by the parser).
fn integer_total(value: &serde_json::Value, total: &mut u128) {
    use serde_json::Value;
    match value {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                *total += u128::from(u);
            } else if let Some(i) = n.as_i64() {
                *total += u128::from(i.unsigned_abs());
            }
        }
        Value::Array(items) => items.iter().for_each(|v| integer_total(v, total)),
        Value::Object(fields) => fields.values().for_each(|v| integer_total(v, total)),
        _ => {}
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
    }
}
