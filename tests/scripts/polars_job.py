"""polars (its own bundled jemalloc, which maps its extents `MAP_NORESERVE` and gives pages
back with `madvise`), when importable (else it says it skipped): a hash join of two 10M-row
frames, then a sort of the result. Known truth: `joined` and `ordered` are each 10M rows of
three 8-byte columns (240 MB, 229 MiB) and both are alive when the sort finishes; the memory
mlprof counts at its peak comes within 15% of the kernel's RSS peak, and is mostly polars'
mapped memory (the numpy inputs of `left` and `right` are a sixth of it each). The lines are
taken at that peak, while `joined` is alive: polars' lines hold its frame. Prints on stderr
`sort began S`: seconds from the process's start (the kernel's start time) to the sort."""
import os
import sys
import time

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


def since_start():
    """Seconds since this process started, by the kernel's clocks (boot time, in ticks)."""
    with open("/proc/self/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    return time.clock_gettime(time.CLOCK_BOOTTIME) - started


sort_began = since_start()
ordered = joined.sort("a")  # @sort
print(f"sort began {sort_began:.3f}", file=sys.stderr, flush=True)
print(joined.height, ordered.height, flush=True)
