//! Turning raw addresses from the profiled process into names: CPython code objects to file,
//! function and line (`linetable`), native instruction pointers to library and symbol
//! (`native`), and source text for the lines a profile reports (`sources`).

pub mod linetable;
pub mod native;
pub mod sources;

use crate::collect::Recording;
use crate::model::NativeNames;

/// Name every sampled instruction pointer of the recording (reads the mapped ELF files).
pub fn native_names(rec: &Recording) -> NativeNames {
    let mut symbolizer = native::Symbolizer::new();
    for channel in &rec.channels {
        symbolizer.want(&channel.maps, channel.samples.iter().map(|s| s.ip));
    }
    let mut names = NativeNames::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        for sample in &channel.samples {
            if names.contains_key(&(ci, sample.ip)) {
                continue;
            }
            if let Some(resolved) = symbolizer.resolve(&channel.maps, sample.ip) {
                names.insert((ci, sample.ip), resolved);
            }
        }
    }
    names
}
