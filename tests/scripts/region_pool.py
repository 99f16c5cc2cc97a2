"""Known truth for one pipeline, run or attached.

Without an argument: a region (`mlprof.mark`) that makes an 80 MiB float64 array with numpy's
default dtype and holds it at the peak: the `float64` hint (a rule that reads the line's source
text) names its line; the region's page is a profile like the run's, with the run's sampling
means and CPUs.

With an argument: `ready`, then two OpenBLAS threads (OPENBLAS_NUM_THREADS=2) multiplying
matrices for that many seconds, for `mlprof attach` confined to one CPU: more busy threads
than its CPUs, which the `threads` hint names."""
import sys
import time

import numpy as np

if len(sys.argv) > 1:
    a = np.random.default_rng(4).standard_normal((600, 600))
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < deadline:
        a @ a  # @pool
    print("done True", flush=True)
else:
    import mlprof

    with mlprof.mark("held"):
        held = np.ones(10 * 2**20)  # @held
        total = float(held.sum())
    print("done", total, flush=True)
