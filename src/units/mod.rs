//! Quantities as people read and write them: sizes and durations printed (`312.4 MiB`,
//! `45 ms`) and sizes parsed ([`size::parse`]). A leaf: every stage may use it.

pub mod size;

/// Bytes with a binary unit: `312.4 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Seconds: `1.23 s`, `45 ms`.
pub fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(300 * 1024 * 1024), "300.0 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(seconds(0.0451), "45 ms");
        assert_eq!(seconds(12.345), "12.35 s");
    }
}
