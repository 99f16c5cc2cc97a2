//! Budgets → verdicts: the CI gate. Limits on the process tree's peak heap (exact counters, so
//! repeated runs give the same verdict), peak RSS (noisier: documented as such) and bytes held
//! by lines flagged as likely leaks. Each violation says what, by how much, and where.

use crate::model::{Profile, Violation};
use crate::render::units::bytes;

/// Exit code of `mlprof run` / `mlprof check` when a budget is exceeded (and the program itself
/// succeeded: its own failure keeps its own code).
pub const EXIT_BUDGET: i32 = 97;

/// The limits of a run; `None` = no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    /// Peak heap of the tree.
    pub max_peak_bytes: Option<u64>,
    /// Peak RSS of the tree.
    pub max_rss_bytes: Option<u64>,
    /// Bytes still held at the end by lines flagged as likely leaks.
    pub max_leak_bytes: Option<u64>,
}

impl Budgets {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.max_peak_bytes.is_some()
            || self.max_rss_bytes.is_some()
            || self.max_leak_bytes.is_some()
    }
}

/// Every budget `p` exceeds.
pub fn verdicts(p: &Profile, b: &Budgets) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Some(limit) = b.max_peak_bytes.filter(|&l| p.memory.peak_heap_bytes > l) {
        out.push(violation(
            "peak_heap",
            "peak heap",
            limit,
            p.memory.peak_heap_bytes,
            &holders(p),
        ));
    }
    if let Some(limit) = b.max_rss_bytes.filter(|&l| p.memory.peak_rss_bytes > l) {
        out.push(violation(
            "peak_rss",
            "peak RSS",
            limit,
            p.memory.peak_rss_bytes,
            &holders(p),
        ));
    }
    if let Some(limit) = b.max_leak_bytes {
        let leaking: Vec<(String, u64)> = p
            .lines
            .iter()
            .filter(|l| l.measures.leak.is_some())
            .map(|l| {
                (
                    place(&l.file, l.line),
                    l.footprint_bytes
                        .last()
                        .copied()
                        .unwrap_or(l.measures.peak_bytes),
                )
            })
            .collect();
        let total: u64 = leaking.iter().map(|(_, b)| b).sum();
        if total > limit {
            let by: Vec<String> = leaking
                .iter()
                .map(|(at, b)| format!("{at} holds {}", bytes(*b)))
                .collect();
            out.push(violation(
                "leaks",
                "likely leaks",
                limit,
                total,
                &by.join(", "),
            ));
        }
    }
    out
}

fn violation(budget: &str, what: &str, limit: u64, actual: u64, whereabouts: &str) -> Violation {
    let mut message = format!(
        "budget exceeded: {what} {} > {}",
        bytes(actual),
        bytes(limit)
    );
    if !whereabouts.is_empty() {
        message.push_str(&format!(" ({whereabouts})"));
    }
    Violation {
        budget: budget.to_string(),
        limit_bytes: limit,
        actual_bytes: actual,
        message,
    }
}

/// The three lines holding most at the heap peak: `train.py:88 held 3.9 GiB, ...`.
fn holders(p: &Profile) -> String {
    let mut top: Vec<_> = p
        .lines
        .iter()
        .filter(|l| l.measures.peak_bytes > 0)
        .collect();
    top.sort_by_key(|l| std::cmp::Reverse(l.measures.peak_bytes));
    top.iter()
        .take(3)
        .map(|l| {
            format!(
                "{} held {}",
                place(&l.file, l.line),
                bytes(l.measures.peak_bytes)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn place(file: &str, line: u32) -> String {
    format!("{}:{line}", file.rsplit('/').next().unwrap_or(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LineStats, SCHEMA};

    #[test]
    fn exceeded_budgets_name_the_lines_that_hold_memory() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            ..Profile::default()
        };
        p.memory.peak_heap_bytes = 7 << 30;
        let mut l = LineStats {
            file: "/w/train.py".into(),
            line: 88,
            ..LineStats::default()
        };
        l.measures.peak_bytes = 4 << 30;
        p.lines.push(l);
        let b = Budgets {
            max_peak_bytes: Some(6 << 30),
            ..Budgets::default()
        };
        let v = verdicts(&p, &b);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "budget exceeded: peak heap 7.0 GiB > 6.0 GiB (train.py:88 held 4.0 GiB)"
        );
        assert!(verdicts(
            &p,
            &Budgets {
                max_peak_bytes: Some(8 << 30),
                ..Budgets::default()
            }
        )
        .is_empty());
    }
}
