//! Turning raw addresses from the profiled process into names: CPython code objects to file,
//! function and line (`linetable`), native instruction pointers to library and symbol
//! (`native`). Reads the recording and the files on disk; produces names, never a profile.

pub mod linetable;
pub mod native;

use std::collections::HashMap;

use crate::recording::Recording;

/// Native names of sampled instruction pointers, by (channel index, ip).
pub type NativeNames = HashMap<(usize, u64), native::Resolved>;

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
