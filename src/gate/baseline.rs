//! Regressions against a saved profile (`--baseline PROFILE`): a measure fails when it grew by
//! more than a percentage *and* an absolute floor, so noise never fails a build. Compared: the
//! tree's peak heap, and each line's bytes allocated and held at the peak (lines matched and noise
//! judged as `mlprof diff` does: `model::diff`).

use crate::model::diff::LineStatus;
use crate::model::{Amount, Budget, Profile, Violation};
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
            Budget::BaselinePeakHeap,
            "peak heap",
            before,
            after,
            None,
            None,
        ));
    }
    // Lines matched as `mlprof diff` matches them (moved lines are the same line), and a
    // line's growth must also be beyond its sampling noise.
    let diff = crate::model::diff::compare(base, "", now, "");
    for l in diff
        .lines
        .iter()
        .filter(|l| l.line > 0 && l.status != LineStatus::Gone)
    {
        let name = l.file.rsplit('/').next().unwrap_or(&l.file);
        for (figure, what, before, after) in [
            (
                "alloc_bytes",
                "allocated",
                l.base.alloc_bytes,
                l.new.alloc_bytes,
            ),
            (
                "peak_bytes",
                "held at the peak",
                l.base.peak_bytes,
                l.new.peak_bytes,
            ),
        ] {
            if l.is_meaningful(figure) && t.exceeded(before, after) {
                out.push(regression(
                    Budget::BaselineLine,
                    &format!("{name}:{} {what}", l.line),
                    before,
                    after,
                    Some(&l.file),
                    Some(l.line),
                ));
            }
        }
    }
    out
}

fn regression(
    budget: Budget,
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
        budget,
        amount: Amount::Bytes {
            limit_bytes: before,
            actual_bytes: after,
        },
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
