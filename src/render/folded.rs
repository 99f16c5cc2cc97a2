//! Folded stacks (`frame;frame;frame value` per line), the input of `flamegraph.pl`, inferno
//! and most flame graph tools. One measure per export.

use std::fmt::Write;

use super::Measure;
use crate::model::{Profile, StackFrame};

/// One line per stack with a non-zero value of `measure` (microseconds for times, bytes for
/// memory), outermost frame first.
pub fn render(p: &Profile, measure: Measure) -> String {
    let mut out = String::new();
    for stack in &p.stacks {
        let value = measure.value(stack);
        if value == 0 {
            continue;
        }
        let names: Vec<String> = stack
            .frames
            .iter()
            .filter_map(|&i| p.stack_frames.get(i as usize))
            .map(name)
            .collect();
        let path = if names.is_empty() {
            super::NO_FRAME.to_string()
        } else {
            names.join(";")
        };
        let _ = writeln!(out, "{path} {value}");
    }
    out
}

/// A frame as one token: no `;` (the frame separator, made a space), no line breaks nor
/// other control characters (escaped visibly, as in the terminal report).
fn name(f: &StackFrame) -> String {
    let text = if f.line == 0 {
        format!("{} ({})", f.function, f.file)
    } else {
        format!("{} ({}:{})", f.function, f.file, f.line)
    };
    crate::sanitize::clean(&text).replace(';', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{StackStats, SCHEMA};

    #[test]
    fn stacks_fold_with_their_values() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            ..Profile::default()
        };
        p.stack_frames = vec![
            StackFrame {
                file: "/a/train.py".into(),
                function: "<module>".into(),
                line: 3,
            },
            StackFrame {
                file: "/a/train.py".into(),
                function: "step;odd".into(),
                line: 9,
            },
            StackFrame {
                file: "libopenblas.so".into(),
                function: "dgemm".into(),
                line: 0,
            },
        ];
        p.stacks = vec![
            StackStats {
                frames: vec![0, 1, 2],
                cpu_native_s: 0.25,
                ..StackStats::default()
            },
            StackStats {
                frames: vec![0, 1],
                cpu_python_s: 0.5,
                alloc_bytes: 1024,
                ..StackStats::default()
            },
        ];
        assert_eq!(
            render(&p, Measure::Cpu),
            "<module> (/a/train.py:3);step odd (/a/train.py:9);dgemm (libopenblas.so) 250000\n\
             <module> (/a/train.py:3);step odd (/a/train.py:9) 500000\n"
        );
        assert_eq!(
            render(&p, Measure::Alloc),
            "<module> (/a/train.py:3);step odd (/a/train.py:9) 1024\n"
        );
    }

    /// A name from the program cannot add a line, a frame, or a terminal escape.
    #[test]
    fn odd_names_stay_one_frame_on_one_line() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            ..Profile::default()
        };
        let evil = "\x1b]0;pwned\x07\x1b[2J.py";
        p.stack_frames = vec![
            StackFrame {
                file: evil.into(),
                function: "f\nmain 5\r\x0b\x0c\u{85}\u{2028};g".into(),
                line: 2,
            },
            StackFrame {
                file: "/a/b.py".into(),
                function: "h".into(),
                line: 4,
            },
        ];
        p.stacks = vec![StackStats {
            frames: vec![0, 1],
            cpu_python_s: 0.5,
            ..StackStats::default()
        }];
        let out = render(&p, Measure::Cpu);
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert!(
            !out.trim_end_matches('\n').chars().any(char::is_control),
            "{out:?}"
        );
        let (stack, value) = out.trim_end().rsplit_once(' ').unwrap();
        assert_eq!(value, "500000");
        assert_eq!(stack.split(';').count(), 2, "{stack}");
        assert!(
            stack.starts_with(
                "f\\x0amain 5\\x0d\\x0b\\x0c\\u{85}\\u{2028} g (\\x1b]0 pwned\\x07\\x1b[2J.py:2)"
            ),
            "{stack}"
        );
    }
}
