//! Turning raw addresses from the profiled process into names: CPython code objects to file,
//! function and line (`linetable`), native instruction pointers to library and symbol
//! (`native`). Reads the recording and the files on disk; produces names, never a profile.

pub mod ehframe;
pub mod linetable;
pub mod native;
pub mod perfmap;

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
                    function_offset: None,
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
        // Read once per process, when an address lies outside every mapped file.
        let mut perf_map: Option<Option<perfmap::PerfMap>> = None;
        symbolizer.in_process((channel.pid != 0).then_some(channel.pid));
        for sample in &channel.samples {
            if names.contains_key(&(ci, sample.ip)) || sample.ip == 0 {
                continue;
            }
            let resolved = symbolizer.resolve(&channel.maps, sample.ip);
            if let Some(r) = resolved.as_ref().filter(|r| !anonymous_code(&r.path)) {
                names.insert((ci, sample.ip), r.clone());
                continue;
            }
            // Code the interpreter compiled itself (CPython's JIT): the interpreter's time.
            if channel.in_interpreter_code(sample.ip, sample.t_ns) {
                names.insert((ci, sample.ip), interpreter_jit(sample.ip));
                continue;
            }
            // Outside every file, or in shared anonymous memory (`/dev/zero (deleted)`, a
            // memfd: JIT compilers that map their code twice): code made at run time.
            let map = perf_map.get_or_insert_with(|| perfmap::PerfMap::of_pid(channel.pid));
            match map.as_ref().and_then(|m| m.lookup(sample.ip)) {
                Some(name) => names.insert((ci, sample.ip), jit_function(name, sample.ip)),
                None if resolved.is_some() => {
                    names.insert((ci, sample.ip), jit_function("<JIT code>", sample.ip))
                }
                None => None,
            };
        }
    }
    names
}

/// Whether a mapping's path is anonymous memory rather than a file (shared anonymous
/// mappings show as `/dev/zero (deleted)`, memory files as `/memfd:NAME (deleted)`).
fn anonymous_code(path: &str) -> bool {
    path == "/dev/zero (deleted)" || path.starts_with("/memfd:") || path.starts_with("/SYSV")
}

/// Code CPython's JIT compiled from the process's Python: the interpreter's.
fn interpreter_jit(ip: u64) -> native::Resolved {
    native::Resolved {
        library: INTERPRETER_JIT.to_string(),
        path: String::new(),
        symbol: Some(INTERPRETER_JIT.to_string()),
        class: crate::recording::maps::CodeClass::Interpreter,
        file_offset: ip,
        function_offset: None,
    }
}

/// The name of code CPython's JIT made.
pub const INTERPRETER_JIT: &str = "<CPython JIT>";

/// A function of code generated at run time, named by the process's perf map.
fn jit_function(name: &str, ip: u64) -> native::Resolved {
    native::Resolved {
        library: "<JIT code>".to_string(),
        path: String::new(),
        symbol: Some(name.to_string()),
        class: crate::recording::maps::CodeClass::Native,
        file_offset: ip,
        function_offset: None,
    }
}
