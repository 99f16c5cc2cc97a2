"""polars (its own bundled jemalloc, which maps its extents `MAP_NORESERVE` and gives pages
back with `madvise`), when importable (else it says it skipped): a hash join of two 10M-row
frames, then a sort of the result. Known truth: `joined` and `ordered` are each 10M rows of
three 8-byte columns (240 MB, 229 MiB) and both are alive when the sort finishes, so the `@join`
and `@sort` lines hold at least that much mapped memory at the process's mapped peak; the
memory mlprof counts at its peak comes within 15% of the kernel's RSS peak."""
import sys

try:
    import numpy as np
    import polars as pl
except ImportError:
    print("skipped: polars not installed")
    sys.exit(0)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
rng = np.random.default_rng(0)
left = pl.DataFrame({"k": rng.integers(0, n, n), "a": rng.standard_normal(n)})  # @left
right = pl.DataFrame({"k": np.arange(n), "b": rng.standard_normal(n)})  # @right
joined = left.join(right, on="k", how="inner")  # @join
ordered = joined.sort("a")  # @sort
print(joined.height, ordered.height, flush=True)
