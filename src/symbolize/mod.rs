//! Turning raw addresses from the profiled process into names: CPython code objects to file,
//! function and line (`linetable`), native instruction pointers to library and symbol
//! (`native`). Reads the recording and the files on disk; produces names, never a profile.

pub mod linetable;
pub mod native;

use std::collections::HashMap;

use crate::recording::Recording;

/// Native names of sampled instruction pointers, by (channel index, ip).
pub type NativeNames = HashMap<(usize, u64), native::Resolved>;

/// Only the library and class (interpreter or native) of every sampled instruction pointer,
/// from the maps alone: what telling Python from native time needs, without reading any file
/// (answers the program waits for).
pub fn classes(rec: &Recording) -> NativeNames {
    use crate::recording::maps::{code_class, find_mapping, library_name};
    let mut names = NativeNames::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        for sample in &channel.samples {
            if names.contains_key(&(ci, sample.ip)) {
                continue;
            }
            if let Some(m) = find_mapping(&channel.maps, sample.ip) {
                let resolved = native::Resolved {
                    library: library_name(&m.path).to_string(),
                    path: m.path.clone(),
                    symbol: None,
                    class: code_class(&m.path),
                    file_offset: sample.ip - m.start + m.offset,
                };
                names.insert((ci, sample.ip), resolved);
            }
        }
    }
    names
}

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
