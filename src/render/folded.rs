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
            "<no Python frame>".to_string()
        } else {
            names.join(";")
        };
        let _ = writeln!(out, "{path} {value}");
    }
    out
}

/// A frame as one token: no `;`, no line breaks.
fn name(f: &StackFrame) -> String {
    let text = if f.line == 0 {
        format!("{} ({})", f.function, f.file)
    } else {
        format!("{} ({}:{})", f.function, f.file, f.line)
    };
    text.replace([';', '\n', '\r'], " ")
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
}
