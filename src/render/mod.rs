//! Renderers: one module per output format behind one signature, reading only the model.
//! Formats never import each other.

pub mod html;
pub mod json;
pub mod text;
pub mod units;

use crate::error::Result;
use crate::model::Profile;

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

/// Render `profile` in `format`.
pub fn render(profile: &Profile, format: Format) -> Result<String> {
    match format {
        Format::Text => Ok(text::render(profile)),
        Format::Json => json::render(profile),
        Format::Html => html::render(profile),
    }
}
