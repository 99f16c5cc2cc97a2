//! Renderers: one module per output format behind one signature, reading only the model.
//! Formats never import each other.

pub mod chrome;
pub mod diff;
pub mod folded;
mod gpu_text;
pub mod html;
pub mod json;
mod layout;
pub mod pprof;
pub mod speedscope;
pub mod sweep;
pub mod text;

/// What the stack exports (folded, pprof, speedscope) name a stack with no frame: CPU a thread
/// used outside Python (start-up, shutdown, a thread without Python).
pub const NO_FRAME: &str = "<no Python frame>";

use crate::error::Result;

/// An argument longer than this is shown by its first [`ARG_SHOWN`] characters and its length.
const ARG_LIMIT: usize = 200;
const ARG_SHOWN: usize = 80;

/// A command line as reports show it: its arguments joined by spaces, each one longer than 200
/// characters cut to its first 80 and `… (N bytes)`. The JSON profile keeps the whole command;
/// a report that names it should not be megabytes of one argument (a program given its data
/// on the command line).
pub fn shown_command(command: &[String]) -> String {
    let mut out = String::new();
    for (i, arg) in command.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if arg.chars().count() > ARG_LIMIT {
            out.extend(arg.chars().take(ARG_SHOWN));
            out.push_str(&format!("\u{2026} ({} bytes)", arg.len()));
        } else {
            out.push_str(arg);
        }
    }
    out
}

use crate::model::Profile;
/// The narrowest width a text document is laid out at.
pub use layout::MIN_WIDTH;

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Terminal report.
    Text,
    /// The JSON profile.
    Json,
    /// Self-contained HTML page.
    Html,
}

/// Render `profile` in `format`, with `style` for the terminal report.
pub fn render_for(profile: &Profile, format: Format, style: text::Style) -> Result<String> {
    match format {
        Format::Text => Ok(text::render_styled(profile, style)),
        other => render(profile, other),
    }
}

/// Render `profile` in `format`.
pub fn render(profile: &Profile, format: Format) -> Result<String> {
    match format {
        Format::Text => Ok(text::render(profile)),
        Format::Json => json::render(profile),
        Format::Html => html::render(profile),
    }
}

/// What a stack export weighs stacks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Measure {
    /// CPU time (Python and native), in microseconds.
    Cpu,
    /// CPU time plus waiting time, in microseconds.
    Wall,
    /// Bytes allocated.
    Alloc,
    /// Bytes still live at the heap peak.
    Peak,
}

impl Measure {
    /// The stack's value: microseconds for times, bytes for memory.
    pub fn value(self, s: &crate::model::StackStats) -> u64 {
        let us = |secs: f64| (secs * 1e6).round() as u64;
        match self {
            Measure::Cpu => us(s.cpu_python_s + s.cpu_native_s + s.kernel_s),
            Measure::Wall => us(s.cpu_python_s + s.cpu_native_s + s.kernel_s + s.waiting_s),
            Measure::Alloc => s.alloc_bytes,
            Measure::Peak => s.peak_bytes,
        }
    }

    /// Whether the measure is a time.
    pub fn is_time(self) -> bool {
        matches!(self, Measure::Cpu | Measure::Wall)
    }

    /// A title for viewers.
    pub fn title(self) -> &'static str {
        match self {
            Measure::Cpu => "CPU time",
            Measure::Wall => "CPU and waiting time",
            Measure::Alloc => "bytes allocated",
            Measure::Peak => "bytes held at the heap peak",
        }
    }
}

#[cfg(test)]
mod command_tests {
    use super::shown_command;

    #[test]
    fn long_arguments_are_cut_and_short_ones_kept() {
        let long = "x".repeat(128 * 1024);
        let shown = shown_command(&["python".into(), "-c".into(), long, "ok".into()]);
        assert_eq!(
            shown,
            format!("python -c {}\u{2026} (131072 bytes) ok", "x".repeat(80))
        );
        let exact = "y".repeat(200);
        assert_eq!(shown_command(std::slice::from_ref(&exact)), exact);
    }
}
