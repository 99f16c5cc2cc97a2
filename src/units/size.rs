//! Byte sizes as people write them: `2GiB`, `500MB`, `1.5G`, `512k`, `1000`.

/// Parse a size; binary units for `Ki`/`Mi`/`Gi`/`Ti` and bare `K`/`M`/`G`/`T`, decimal for
/// `KB`/`MB`/`GB`/`TB`. Case-insensitive; a trailing `B` or `iB` is optional.
pub fn parse(text: &str) -> Result<u64, String> {
    // Quoted in errors: never a control character on the user's terminal.
    let quoted = crate::sanitize::clean(text);
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{quoted}' is not a size (try 512MiB, 2GB, 1.5G)"))?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "ki" | "kib" => 1024.0,
        "m" | "mi" | "mib" => 1024f64.powi(2),
        "g" | "gi" | "gib" => 1024f64.powi(3),
        "t" | "ti" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "'{quoted}': unknown size unit '{}' (try KiB, MiB, GiB, MB, GB)",
                crate::sanitize::clean(other)
            ))
        }
    };
    let bytes = value * multiplier;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{quoted}' is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// A limit given on the command line (`--max-peak`): a size, where a bare number other than 0
/// is refused rather than read as bytes, since `--max-peak 50` means 50 MiB or 50 GiB far more
/// often than 50 bytes. `50B` says bytes.
pub fn parse_limit(text: &str) -> Result<u64, String> {
    let bytes = parse(text)?;
    let t = text.trim();
    if bytes != 0 && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "'{t}' has no unit: write {t}B for bytes, or {t}MiB, {t}GiB, {t}GB"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::{parse, parse_limit};

    #[test]
    fn a_limit_needs_a_unit_unless_it_is_zero() {
        assert_eq!(parse_limit("2GiB"), Ok(2 << 30));
        assert_eq!(parse_limit("50B"), Ok(50));
        assert_eq!(parse_limit("0"), Ok(0));
        assert_eq!(
            parse_limit(" 50 "),
            Err("'50' has no unit: write 50B for bytes, or 50MiB, 50GiB, 50GB".into())
        );
        assert!(parse_limit("1.5").unwrap_err().contains("no unit"));
        assert!(parse_limit("lots").unwrap_err().contains("not a size"));
    }

    #[test]
    fn sizes_parse_the_way_people_write_them() {
        assert_eq!(parse("2GiB"), Ok(2 << 30));
        assert_eq!(parse("500MB"), Ok(500_000_000));
        assert_eq!(parse("1.5G"), Ok(3 << 29));
        assert_eq!(parse("512k"), Ok(512 << 10));
        assert_eq!(parse("1000"), Ok(1000));
        assert_eq!(parse(" 64 MiB "), Ok(64 << 20));
        assert!(parse("lots").is_err());
        assert!(parse("5 parsecs")
            .unwrap_err()
            .contains("unknown size unit"));
    }

    /// Random text and mutations of valid sizes: a size or an error, never a panic (the
    /// binary aborts on one); sizes written as integers read back exactly.
    #[test]
    fn fuzzed_sizes_parse_or_fail_cleanly() {
        const VALID: [&str; 8] = [
            "2GiB", "500MB", "1.5G", "512k", "1000", " 64 MiB ", "0.5tb", "3 Ki",
        ];
        const PIECES: [&str; 22] = [
            "0",
            "1",
            "9",
            ".",
            "..",
            "e",
            "E5",
            "-",
            "+",
            " ",
            "k",
            "Mi",
            "GiB",
            "tb",
            "B",
            "iB",
            "é",
            "\u{1b}",
            "\u{0}",
            "1e308",
            "99999999999999999999999",
            "\u{9b}",
        ];
        let mut rng = crate::test_rng::Rng::new(0x853c_49e6_748f_ea9b);
        let mut next = move |n: usize| rng.below(n.max(1) as u64) as usize;
        let mut ok = 0;
        for case in 0..20_000 {
            let text: String = match case % 3 {
                0 => {
                    let bytes: Vec<u8> = (0..next(24)).map(|_| next(256) as u8).collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                }
                1 => (0..next(6)).map(|_| PIECES[next(PIECES.len())]).collect(),
                _ => {
                    let mut t: Vec<char> = VALID[next(VALID.len())].chars().collect();
                    for _ in 0..1 + next(3) {
                        let at = next(t.len() + 1);
                        let piece = PIECES[next(PIECES.len())];
                        match next(3) {
                            0 if at < t.len() => {
                                t.remove(at);
                            }
                            _ => t.splice(at..at, piece.chars()).for_each(drop),
                        }
                    }
                    t.into_iter().collect()
                }
            };
            match parse(&text) {
                Ok(_) => ok += 1,
                Err(e) => assert!(
                    !e.is_empty() && !e.chars().any(char::is_control),
                    "{text:?}: {e:?}"
                ),
            }
            let n = (next(usize::MAX) as u64) >> next(64);
            if n < 1 << 53 {
                assert_eq!(parse(&n.to_string()), Ok(n));
            }
        }
        assert!(ok > 100, "some mutations stay valid: {ok}");
    }
}
