//! What a native function's time is, by its name and library: work, a thread pool's spinning
//! and barrier waiting, or numpy copying arrays element by element. Pure; the names are the
//! runtimes' own (`docs/design/native-kinds.md`).

/// The folded name a line's spinning and barrier waiting is shown under, one row per runtime
/// library, apart from the kernels the pool ran.
pub const SPIN: &str = "<pool spin and barrier wait>";

/// What a native function's time is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeKind {
    /// Anything else: the computation the program asked for.
    Work,
    /// A thread pool waiting rather than working: the OpenMP runtime itself (libgomp's
    /// `gomp_team_barrier_wait_end`, libomp's `__kmp_wait_template`: a pool's useful work runs
    /// in the outlined functions of the library that started the region, never in the runtime),
    /// OpenBLAS's server loop waiting for work, and `sched_yield` on a thread without Python.
    Spin,
    /// numpy's element-wise copy and cast loops (a transposed or strided view made contiguous,
    /// `astype`, `take`): copies that never reach `memcpy`, so their bytes are not counted.
    Copy,
}

/// The kind of `symbol` in `library` (a file name, as `Resolved::library`).
pub fn of(symbol: &str, library: &str) -> NativeKind {
    if openmp_runtime(library) || symbol == "blas_thread_server" || symbol == "sched_yield" {
        return NativeKind::Spin;
    }
    if library.starts_with("_multiarray_umath") && element_copy(symbol) {
        return NativeKind::Copy;
    }
    NativeKind::Work
}

/// The OpenMP runtimes, as shipped by distributions and bundled by wheels
/// (`libgomp-a34b3233.so.1`, `libiomp5.so`, `libomp.so.5`).
fn openmp_runtime(library: &str) -> bool {
    ["libgomp.", "libgomp-", "libomp.", "libomp-", "libiomp5"]
        .iter()
        .any(|p| library.starts_with(p))
}

/// numpy's data-transfer loops (`lowlevel_strided_loops`: `_aligned_strided_to_contig_size8`,
/// `_contig_to_contig`, `_swap_strided_to_strided_size4`), its casts
/// (`_aligned_contig_cast_double_to_float`) and its take/fancy-index gathers. A source stride
/// of 0 (`..._srcstride0`) broadcasts one value: a fill (`np.ones`, `a[:] = 0`), not a copy.
fn element_copy(symbol: &str) -> bool {
    if symbol.contains("srcstride0") {
        return false;
    }
    let transfer = symbol.contains("strided_to_") || symbol.contains("contig_to_");
    let cast = symbol.contains("_cast_");
    let gather = [
        "npy_fasttake",
        "mapiter_get",
        "mapiter_trivial_get",
        "PyArray_TakeFrom",
    ]
    .iter()
    .any(|g| symbol.starts_with(g));
    transfer || cast || gather
}

#[cfg(test)]
mod tests {
    use super::*;

    const NUMPY: &str = "_multiarray_umath.cpython-311-x86_64-linux-gnu.so";

    #[test]
    fn openmp_runtimes_and_blas_servers_spin() {
        for (symbol, library) in [
            ("gomp_team_barrier_wait_end", "libgomp-a34b3233.so.1"),
            ("gomp_barrier_wait_end", "libgomp.so.1"),
            ("libgomp.so.1+0x1f2c0", "libgomp.so.1"),
            ("__kmp_wait_template", "libomp.so.5"),
            ("__kmp_fork_barrier", "libiomp5.so"),
            ("blas_thread_server", "libscipy_openblas64_-32a4b2a6.so"),
            ("sched_yield", "libc.so.6"),
        ] {
            assert_eq!(
                of(symbol, library),
                NativeKind::Spin,
                "{symbol} in {library}"
            );
        }
    }

    #[test]
    fn numpy_element_copies_are_copies_and_fills_are_not() {
        for symbol in [
            "_aligned_strided_to_contig_size8",
            "_contig_to_contig",
            "_swap_strided_to_strided_size4",
            "_aligned_contig_cast_double_to_float",
            "_cast_long_to_double",
            "npy_fasttake_impl",
            "mapiter_trivial_get",
        ] {
            assert_eq!(of(symbol, NUMPY), NativeKind::Copy, "{symbol}");
        }
        for symbol in [
            "_aligned_strided_to_contig_size8_srcstride0",
            "DOUBLE_add_AVX2",
            "DOUBLE_matmul_inner_noblas",
        ] {
            assert_eq!(of(symbol, NUMPY), NativeKind::Work, "{symbol}");
        }
    }

    #[test]
    fn kernels_elsewhere_are_work() {
        assert_eq!(
            of("dgemm_kernel_HASWELL", "libscipy_openblas64_-32a4b2a6.so"),
            NativeKind::Work
        );
        // A library merely named like a copy loop is not numpy's.
        assert_eq!(of("_contig_to_contig", "libother.so"), NativeKind::Work);
        assert_eq!(of("memcpy", "libc.so.6"), NativeKind::Work);
    }
}
