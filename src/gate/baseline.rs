//! Regressions against a saved profile (`--baseline PROFILE`): a measure fails when it grew by
//! more than a percentage *and* an absolute floor, so noise never fails a build. Compared: the
//! tree's peak heap, and each line's bytes allocated (lines matched by file name and line).

use std::collections::HashMap;

use crate::model::{Profile, Violation};
use crate::units::bytes;

/// Growth allowed before a regression, in percent.
pub const DEFAULT_PERCENT: f64 = 20.0;
/// Growth always allowed, in bytes.
pub const DEFAULT_FLOOR: u64 = 10 << 20;

/// How much growth is noise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Percent growth allowed.
    pub percent: f64,
    /// Bytes of growth always allowed.
    pub floor_bytes: u64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            percent: DEFAULT_PERCENT,
            floor_bytes: DEFAULT_FLOOR,
        }
    }
}

impl Tolerance {
    fn exceeded(&self, before: u64, after: u64) -> bool {
        after > before
            && after - before > self.floor_bytes
            && (after - before) as f64 > before as f64 * self.percent / 100.0
    }
}

/// Every regression of `now` against `base`.
pub fn regressions(now: &Profile, base: &Profile, t: &Tolerance) -> Vec<Violation> {
    let mut out = Vec::new();
    let (before, after) = (base.memory.peak_heap_bytes, now.memory.peak_heap_bytes);
    if t.exceeded(before, after) {
        out.push(regression(
            "baseline_peak_heap",
            "peak heap",
            before,
            after,
            None,
            None,
        ));
    }
    let key = |file: &str, line: u32| (file.rsplit('/').next().unwrap_or(file).to_string(), line);
    let old: HashMap<(String, u32), u64> = base
        .lines
        .iter()
        .map(|l| (key(&l.file, l.line), l.measures.alloc_bytes))
        .collect();
    for l in now.lines.iter().filter(|l| l.line > 0) {
        let before = old.get(&key(&l.file, l.line)).copied().unwrap_or(0);
        if t.exceeded(before, l.measures.alloc_bytes) {
            let what = format!("{}:{} allocated", key(&l.file, l.line).0, l.line);
            out.push(regression(
                "baseline_line",
                &what,
                before,
                l.measures.alloc_bytes,
                Some(&l.file),
                Some(l.line),
            ));
        }
    }
    out
}

fn regression(
    budget: &str,
    what: &str,
    before: u64,
    after: u64,
    file: Option<&str>,
    line: Option<u32>,
) -> Violation {
    let growth = if before > 0 {
        format!("+{:.0}%", 100.0 * (after - before) as f64 / before as f64)
    } else {
        "new".into()
    };
    Violation {
        budget: budget.to_string(),
        limit_bytes: before,
        actual_bytes: after,
        message: format!(
            "regression: {what} {} vs {} in the baseline ({growth})",
            bytes(after),
            bytes(before)
        ),
        file: file.map(str::to_string),
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_must_pass_both_the_percentage_and_the_floor() {
        let t = Tolerance::default();
        assert!(t.exceeded(100 << 20, 200 << 20));
        assert!(!t.exceeded(100 << 20, 115 << 20), "15% is noise");
        assert!(!t.exceeded(1 << 20, 8 << 20), "under the 10 MiB floor");
        assert!(!t.exceeded(200 << 20, 100 << 20), "shrinking is fine");
    }
}
