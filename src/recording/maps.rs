//! The files a process had mapped (from `/proc/PID/maps`, read by `collect::procfs` while the
//! process lived): what turns a native instruction pointer into a library and an ELF address.

/// One line of `/proc/PID/maps` that is backed by a file (or is `[vdso]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// First address of the mapping in the target.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset that `start` maps.
    pub offset: u64,
    /// Path as the kernel prints it, including a ` (deleted)` suffix; or `[vdso]`.
    pub path: String,
    /// The mapping is executable (`x` in the permissions).
    pub executable: bool,
    /// Device of the mapped file, as `stat`'s `st_dev` encodes it (from `maps`' `MAJ:MIN`).
    pub dev: u64,
    /// Inode of the mapped file (0: not known).
    pub inode: u64,
}

/// The mapping containing `ip`: binary search when `maps` is sorted (as the kernel prints
/// it), linear scan otherwise.
pub fn find_mapping(maps: &[MappedFile], ip: u64) -> Option<&MappedFile> {
    find_mapping_index(maps, ip).map(|i| &maps[i])
}

/// Where in `maps` [`find_mapping`] finds `ip`.
pub fn find_mapping_index(maps: &[MappedFile], ip: u64) -> Option<usize> {
    let contains = |m: &MappedFile| m.start <= ip && ip < m.end;
    let pos = maps.partition_point(|m| m.start <= ip);
    pos.checked_sub(1)
        .filter(|&i| contains(&maps[i]))
        .or_else(|| maps.iter().position(contains))
}

/// The maps of a process read again (`newer`, as the kernel prints them) over those read before
/// (`older`): the newer read wins where they overlap, and what it no longer shows is kept, so
/// that samples taken in a library since unloaded still resolve. A process that is a zombie or
/// exiting shows no mappings at all: such a read changes nothing, rather than losing every name
/// of the process.
pub fn merge_newer(older: &[MappedFile], newer: Vec<MappedFile>) -> Vec<MappedFile> {
    if newer.is_empty() {
        return older.to_vec();
    }
    let mut merged = newer;
    let overlaps = |m: &MappedFile, fresh: &[MappedFile]| {
        let pos = fresh.partition_point(|n| n.end <= m.start);
        fresh.get(pos).is_some_and(|n| n.start < m.end)
    };
    merged.sort_by_key(|m| m.start);
    let kept: Vec<MappedFile> = older
        .iter()
        .filter(|m| !overlaps(m, &merged))
        .cloned()
        .collect();
    merged.extend(kept);
    merged.sort_by_key(|m| m.start);
    merged
}

/// Whether time at an instruction pointer counts as the interpreter's or native code's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeClass {
    /// The Python executable, libpython, and the runtime the interpreter itself calls
    /// (ld.so, libc, libm, libpthread, libdl, libutil, `[vdso]`).
    Interpreter,
    /// Everything else: extension modules, BLAS, OpenMP, onnxruntime, torch, ...
    Native,
}

/// File name of a mapping path, without a ` (deleted)` suffix.
pub fn library_name(path: &str) -> &str {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.rsplit('/').next().unwrap_or(path)
}

/// Classifies a mapping path by its file name.
///
/// Interpreter: `python`, `python3`, `python3.X` (and suffixed names such as `python3.13t`,
/// `python3.11-dbg`), `libpython*.so*`, `ld-*.so*` (ld-linux, ld-musl, old `ld-2.31.so`),
/// `libc`, `libm`, `libpthread`, `libdl`, `libutil` (`libX.so*` or old `libX-2.NN.so`), and
/// `[vdso]`. Everything else is Native, including CPython's own extension modules in
/// `lib-dynload` (`_json.cpython-311-x86_64-linux-gnu.so`, `math.cpython-*.so`): they are C
/// code doing the work of one call, like any third-party extension.
pub fn code_class(path: &str) -> CodeClass {
    let name = library_name(path);
    // mlprof's own hooks run on behalf of the line (its allocations and copies): counting them
    // as native code would make pure-Python lines look native.
    // In the run's directory, or in the lasting directory under a name with a content hash.
    let ours = name.starts_with("libmlprof_preload") && name.ends_with(".so");
    if ours || name == "[vdso]" || is_python_executable(name) || is_interpreter_library(name) {
        CodeClass::Interpreter
    } else {
        CodeClass::Native
    }
}

fn is_python_executable(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("python") else {
        return false;
    };
    !name.contains(".so") && (rest.is_empty() || rest.starts_with(|c: char| c.is_ascii_digit()))
}

fn is_interpreter_library(name: &str) -> bool {
    if (name.starts_with("libpython") || name.starts_with("ld-")) && name.contains(".so") {
        return true;
    }
    ["c", "m", "pthread", "dl", "util"].iter().any(|stem| {
        let Some(rest) = name.strip_prefix("lib").and_then(|r| r.strip_prefix(stem)) else {
            return false;
        };
        let old_glibc = rest
            .strip_prefix('-')
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()) && v.ends_with(".so"));
        rest.starts_with(".so") || old_glibc
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, end: u64, path: &str) -> MappedFile {
        MappedFile {
            start,
            end,
            offset: 0,
            path: path.to_string(),
            executable: true,
            dev: 0,
            inode: 1,
        }
    }

    #[test]
    fn a_read_of_a_zombie_keeps_the_maps_read_before() {
        let older = vec![mapping(0x1000, 0x2000, "/lib/libc.so.6")];
        assert_eq!(merge_newer(&older, Vec::new()), older);
    }

    #[test]
    fn newer_maps_win_where_they_overlap_and_unloaded_libraries_stay() {
        let older = vec![
            mapping(0x1000, 0x2000, "/lib/libc.so.6"),
            mapping(0x3000, 0x5000, "/x/unloaded.so"),
            mapping(0x8000, 0x9000, "/x/replaced.so"),
        ];
        let newer = vec![
            mapping(0x1000, 0x2000, "/lib/libc.so.6"),
            mapping(0x6000, 0x7000, "/x/loaded.so"),
            mapping(0x8800, 0x9800, "/x/other.so"),
        ];
        let merged = merge_newer(&older, newer);
        let paths: Vec<&str> = merged.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/lib/libc.so.6",
                "/x/unloaded.so",
                "/x/loaded.so",
                "/x/other.so"
            ]
        );
        assert_eq!(
            find_mapping(&merged, 0x3100).unwrap().path,
            "/x/unloaded.so"
        );
        assert_eq!(find_mapping(&merged, 0x8900).unwrap().path, "/x/other.so");
    }

    #[test]
    fn code_class_table() {
        use CodeClass::{Interpreter as I, Native as N};
        let table = [
            ("/usr/bin/python", I),
            ("/tmp/mlprof-abc123/libmlprof_preload.so", I),
            (
                "/run/user/1000/mlprof/libmlprof_preload-0123456789abcdef.so",
                I,
            ),
            ("/usr/bin/python3", I),
            ("/root/.pyenv/versions/3.11.7/bin/python3.11", I),
            ("/usr/local/bin/python3.13t", I),
            ("/usr/bin/python3.11-dbg", I),
            ("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0", I),
            ("/usr/lib/libpython3.13t.so.1.0 (deleted)", I),
            ("/lib64/ld-linux-x86-64.so.2", I),
            ("/lib/ld-linux-aarch64.so.1", I),
            ("/lib/x86_64-linux-gnu/libc.so.6", I),
            ("/lib/x86_64-linux-gnu/libc-2.31.so", I),
            ("/lib/x86_64-linux-gnu/libm.so.6", I),
            ("/lib/x86_64-linux-gnu/libpthread.so.0", I),
            ("/lib/x86_64-linux-gnu/libdl.so.2", I),
            ("/lib/x86_64-linux-gnu/libutil.so.1", I),
            ("[vdso]", I),
            (
                "/x/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
                N,
            ),
            ("/x/numpy.libs/libscipy_openblas64_-32a4b2a6.so", N),
            ("/x/libopenblas64_p-r0-5e0b5b9a.3.23.dev.so", N),
            ("/usr/lib/x86_64-linux-gnu/libgomp.so.1", N),
            ("/x/onnxruntime/capi/libonnxruntime.so.1.17.0", N),
            ("/x/torch/lib/libtorch_cpu.so", N),
            ("/x/lib-dynload/zlib.cpython-311-x86_64-linux-gnu.so", N),
            ("/x/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so", N),
            ("/x/lib-dynload/math.cpython-311-x86_64-linux-gnu.so", N),
            ("/usr/lib/x86_64-linux-gnu/libcrypto.so.3", N),
            ("/usr/lib/x86_64-linux-gnu/libc++.so.1", N),
            ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", N),
            ("/usr/lib/x86_64-linux-gnu/libmvec.so.1", N),
            ("/x/python_helper.so", N),
            ("/usr/bin/pythonista", N),
            ("", N),
        ];
        for (path, want) in table {
            assert_eq!(code_class(path), want, "{path}");
        }
    }
}
