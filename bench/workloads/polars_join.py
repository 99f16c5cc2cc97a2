"""polars_join: a polars hash join and sort.

Stresses: a Rust library with its own bundled allocator (jemalloc, mapping its extents
MAP_NORESERVE and giving pages back with madvise) and its own rayon thread pool.

Known truth (default size n = 4,000,000 rows):
  - the join (`@native`) and the sort are native work on polars' pool;
  - the frames live in polars' allocator: mapped memory, not the malloc heap, which a
    profiler that ignores MAP_NORESERVE mappings misses;
  - with n = 0 the script imports polars and joins nothing (the baseline);
  - without polars it prints "skipped: polars not installed" and exits 0.

Usage: python polars_join.py [n]
"""

import sys

try:
    import numpy as np
    import polars as pl
except ImportError:
    print("skipped: polars not installed")
    sys.exit(0)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000
    if n == 0:
        print("polars_join n=0 (imports only)")
        return
    rng = np.random.default_rng(0)
    left = pl.DataFrame({"k": rng.integers(0, n, n), "a": rng.standard_normal(n)})
    right = pl.DataFrame({"k": np.arange(n), "b": rng.standard_normal(n)})
    joined = left.join(right, on="k", how="inner")  # @native
    ordered = joined.sort("a")
    print(f"polars_join n={n} rows={joined.height} {ordered.height}")


if __name__ == "__main__":
    main()
