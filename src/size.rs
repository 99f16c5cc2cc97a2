//! Byte sizes as people write them: `2GiB`, `500MB`, `1.5G`, `512k`, `1000`.

/// Parse a size; binary units for `Ki`/`Mi`/`Gi`/`Ti` and bare `K`/`M`/`G`/`T`, decimal for
/// `KB`/`MB`/`GB`/`TB`. Case-insensitive; a trailing `B` or `iB` is optional.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size (try 512MiB, 2GB, 1.5G)"))?;
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
                "'{text}': unknown size unit '{other}' (try KiB, MiB, GiB, MB, GB)"
            ))
        }
    };
    let bytes = value * multiplier;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse;

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
}
