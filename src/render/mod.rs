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
            Measure::Cpu => us(s.cpu_python_s + s.cpu_native_s),
            Measure::Wall => us(s.cpu_python_s + s.cpu_native_s + s.cpu_system_s),
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
