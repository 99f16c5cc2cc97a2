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
    let profile: Profile = serde_json::from_value(value)
        .map_err(|e| Error::new(format!("{origin}: corrupt profile: {e}")))?;
    if let Some(problem) = invariants::violations(&profile).first() {
        return Err(Error::new(format!(
            "{origin}: inconsistent profile: {problem}"
        )));
    }
    Ok(profile)
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
        ] {
            let err = parse(bad, "p.json").unwrap_err().to_string();
            assert!(err.starts_with("p.json: ") && err.contains(expect), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }
}
