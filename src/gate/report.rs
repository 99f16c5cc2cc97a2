//! Budget verdicts the way CI systems read them: GitHub Actions annotations
//! (`::error file=…,line=…::…`), a Markdown job summary, and JUnit XML.

use crate::model::{Profile, Violation};
use crate::units::bytes;

/// GitHub Actions `::error` commands, one per violation (located when it has a place).
pub fn github_annotations(violations: &[Violation]) -> String {
    let mut out = String::new();
    for v in violations {
        let mut props = vec!["title=mlprof budget".to_string()];
        if let (Some(file), Some(line)) = (&v.file, v.line) {
            props.insert(0, format!("file={},line={line}", escape_property(file)));
        }
        out.push_str(&format!(
            "::error {}::{}\n",
            props.join(","),
            escape_data(&v.message)
        ));
    }
    out
}

/// A Markdown summary for `$GITHUB_STEP_SUMMARY`.
pub fn markdown_summary(p: &Profile) -> String {
    let mut out = format!(
        "### mlprof: `{}`\n\npeak heap **{}**, peak RSS **{}**\n\n",
        p.command.join(" ").replace('`', "'"),
        bytes(p.memory.peak_heap_bytes),
        bytes(p.memory.peak_rss_bytes)
    );
    if p.violations.is_empty() {
        out.push_str("All memory budgets met.\n");
        return out;
    }
    out.push_str("| budget | limit | measured | where |\n| --- | --- | --- | --- |\n");
    for v in &p.violations {
        let at = match (&v.file, v.line) {
            (Some(f), Some(l)) => format!("`{}:{l}`", f.rsplit('/').next().unwrap_or(f)),
            _ => String::new(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {at} |\n",
            v.budget,
            bytes(v.limit_bytes),
            bytes(v.actual_bytes)
        ));
    }
    out
}

/// JUnit XML: one failing test case per violation, or one passing case when all budgets hold.
pub fn junit(p: &Profile) -> String {
    let failures = p.violations.len();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuite name=\"mlprof budgets\" tests=\"{}\" failures=\"{failures}\" time=\"{:.3}\">\n",
        failures.max(1),
        p.wall_s
    ));
    if p.violations.is_empty() {
        out.push_str("  <testcase classname=\"mlprof\" name=\"memory budgets\"/>\n");
    }
    for v in &p.violations {
        out.push_str(&format!(
            "  <testcase classname=\"mlprof\" name=\"{}\">\n    <failure message=\"{}\">{}</failure>\n  </testcase>\n",
            xml(&v.budget),
            xml(&v.message),
            xml(&v.message)
        ));
    }
    out.push_str("</testsuite>\n");
    out
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// GitHub's escaping for a workflow command's message.
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// GitHub's escaping for a workflow command's property values.
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SCHEMA;

    fn failing() -> Profile {
        let mut p = Profile {
            schema: SCHEMA.into(),
            command: vec!["python3".into(), "t.py".into()],
            ..Profile::default()
        };
        p.violations.push(Violation {
            budget: "line".into(),
            limit_bytes: 1 << 20,
            actual_bytes: 2 << 20,
            message: "budget exceeded: t.py:3 held 2.0 MiB > 1.0 MiB <&>".into(),
            file: Some("/w/a,b.py".into()),
            line: Some(3),
        });
        p
    }

    #[test]
    fn annotations_escape_and_locate() {
        let a = github_annotations(&failing().violations);
        assert_eq!(a, "::error file=/w/a%2Cb.py,line=3,title=mlprof budget::budget exceeded: t.py:3 held 2.0 MiB > 1.0 MiB <&>\n");
    }

    #[test]
    fn junit_and_summary_say_what_failed() {
        let x = junit(&failing());
        assert!(
            x.contains("failures=\"1\"") && x.contains("&lt;&amp;&gt;"),
            "{x}"
        );
        assert!(markdown_summary(&failing()).contains("| line | 1.0 MiB | 2.0 MiB | `a,b.py:3` |"));
        let ok = Profile {
            schema: SCHEMA.into(),
            ..Profile::default()
        };
        assert!(
            junit(&ok).contains("failures=\"0\"")
                && markdown_summary(&ok).contains("All memory budgets met")
        );
    }
}
