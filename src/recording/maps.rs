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
