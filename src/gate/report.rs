//! Budget verdicts the way CI systems read them: GitHub Actions annotations
//! (`::error file=…,line=…::…`), a Markdown job summary, and JUnit XML.

use crate::model::{Amount, Profile, Violation};
use crate::sanitize::clean;
use crate::units::{bytes, seconds};

/// GitHub Actions `::error` commands, one per violation (located when it has a place). Messages
/// and file names (the program's) are [`clean`]ed first: the commands are printed to the job's
/// log, and each must stay one line.
pub fn github_annotations(violations: &[Violation]) -> String {
    let mut out = String::new();
    for v in violations {
        let mut props = vec!["title=mlprof budget".to_string()];
        if let (Some(file), Some(line)) = (&v.file, v.line) {
            props.insert(
                0,
                format!("file={},line={line}", escape_property(&clean(file))),
            );
        }
        out.push_str(&format!(
            "::error {}::{}\n",
            props.join(","),
            escape_data(&clean(&v.message))
        ));
    }
    out
}

/// A Markdown summary for `$GITHUB_STEP_SUMMARY`: a table, whatever the program's command line
/// and file names hold (each cell on one line, its pipes and backticks escaped).
pub fn markdown_summary(p: &Profile) -> String {
    let mut out = format!(
        "### mlprof: {}\n\npeak heap **{}**, peak RSS **{}**\n\n",
        code(&p.command.join(" "), false),
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
            (Some(f), Some(l)) => code(&format!("{}:{l}", f.rsplit('/').next().unwrap_or(f)), true),
            _ => String::new(),
        };
        let (limit, actual) = match v.amount {
            Amount::Bytes {
                limit_bytes,
                actual_bytes,
            } => (bytes(limit_bytes), bytes(actual_bytes)),
            Amount::Seconds { limit_s, actual_s } => (seconds(limit_s), seconds(actual_s)),
        };
        out.push_str(&format!(
            "| {} | {limit} | {actual} | {at} |\n",
            cell(v.budget.as_str())
        ));
    }
    out
}

/// Text for a Markdown table cell: one line ([`clean`]), `|` escaped (it would end the cell),
/// and `\`, `` ` ``, `*`, `<`, `[`, `]` escaped so that it is shown as it is.
fn cell(text: &str) -> String {
    let mut out = String::new();
    for c in clean(text).chars() {
        if matches!(c, '\\' | '|' | '`' | '*' | '<' | '[' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `text` in a code span: one line ([`clean`]), backticks (which would end it) as `'`. In a
/// table cell (`in_table`) each `|` is also escaped, as GitHub splits cells at a pipe even
/// inside a code span unless an odd number of backslashes precedes it.
fn code(text: &str, in_table: bool) -> String {
    let mut out = String::from("`");
    for c in clean(text).chars() {
        match c {
            '`' => out.push('\''),
            '|' if in_table => {
                let before = out.len() - out.trim_end_matches('\\').len();
                if before % 2 == 0 {
                    out.push('\\');
                }
                out.push('|');
            }
            c => out.push(c),
        }
    }
    out.push('`');
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
            xml(v.budget.as_str()),
            xml(&v.message),
            xml(&v.message)
        ));
    }
    out.push_str("</testsuite>\n");
    out
}

/// Text for an XML attribute or element: [`clean`]ed first (XML 1.0 allows no control
/// character but tab and newlines, not even escaped), then the markup characters escaped.
fn xml(s: &str) -> String {
    clean(s)
        .replace('&', "&amp;")
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
    use crate::model::{Budget, SCHEMA};

    fn failing() -> Profile {
        let mut p = Profile {
            schema: SCHEMA.into(),
            command: vec!["python3".into(), "t.py".into()],
            ..Profile::default()
        };
        p.violations.push(Violation {
            budget: Budget::Line,
            amount: Amount::Bytes {
                limit_bytes: 1 << 20,
                actual_bytes: 2 << 20,
            },
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

    #[test]
    fn a_cpu_budget_is_summarised_in_seconds() {
        let mut p = failing();
        p.violations[0] = Violation {
            budget: Budget::Cpu,
            amount: Amount::Seconds {
                limit_s: 1.5,
                actual_s: 10.0,
            },
            message: "budget exceeded: CPU time 10.00 s > 1.50 s".into(),
            file: None,
            line: None,
        };
        let md = markdown_summary(&p);
        assert!(md.contains("| cpu | 1.50 s | 10.00 s |  |"), "{md}");
    }

    /// A profile whose command line, file name and message hold what the program chose (a
    /// budget's name is the profile's own: `Budget`).
    fn hostile() -> Profile {
        let evil = "e|v`i\x1b[31m\x07\u{202e}\r\n|l\u{0}<&>\"'\\|\\\\|";
        let mut p = failing();
        p.command = vec!["python".into(), format!("{evil}.py")];
        p.violations[0].file = Some(format!("/w/{evil}.py"));
        p.violations[0].message = format!("budget exceeded: {evil}.py:3 held 2.0 MiB");
        p
    }

    #[test]
    fn whatever_the_names_hold_each_output_keeps_its_form() {
        let p = hostile();
        // JUnit: no character XML 1.0 forbids (escaped or not), every `<` and `&` markup.
        let x = junit(&p);
        assert!(
            !x.chars()
                .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
            "{x:?}"
        );
        let body = x.split_once("<testcase").unwrap().1;
        assert_eq!(body.matches('<').count(), 4, "{x}");
        assert!(!x.contains("&#"), "{x}");
        // The summary: every table row has its five pipes, and nothing breaks a line.
        let md = markdown_summary(&p);
        assert!(!md.chars().any(|c| c.is_control() && c != '\n'), "{md:?}");
        assert!(!md.contains('\u{202e}'), "{md:?}");
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 3, "{md}");
        for row in rows {
            // GitHub's cell scan: `\` and the character after it go together.
            let (mut unescaped, mut chars) = (0, row.chars());
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '|' => unescaped += 1,
                    _ => {}
                }
            }
            assert_eq!(unescaped, 5, "{row}");
        }
        assert!(
            md.starts_with("### mlprof: `python e|v'i\\x1b[31m\\x07\\u{202e}\\x0d\\x0a|l"),
            "{md}"
        );
        // Annotations: one line each, no control character.
        let a = github_annotations(&p.violations);
        assert_eq!(a.lines().count(), 1, "{a}");
        assert!(!a.chars().any(|c| c.is_control() && c != '\n'), "{a:?}");
        assert!(!a.contains('\u{202e}'), "{a:?}");
    }
}
