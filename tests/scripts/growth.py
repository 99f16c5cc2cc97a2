"""Memory that grows with N in two known ways, for `mlprof sweep` and `mlprof diff`.

    python growth.py N [K]

The line marked `square` holds 8 * N**2 bytes and the line marked `linear` 8 * K * N bytes
(K defaults to 1000), both alive at the peak. With MEM_LIMIT_MB set, the address space is
limited to that many MiB first, so a large N fails with MemoryError (exit 1), as under a
container's memory limit.
"""
import os
import resource
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ["N"])
k = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
limit = os.environ.get("MEM_LIMIT_MB")
if limit:
    size = int(limit) << 20
    resource.setrlimit(resource.RLIMIT_AS, (size, size))

import numpy as np  # noqa: E402


def build(n, k):
    square = np.ones((n, n))  # n < 2**16, so <b>this</b> fits  # @square
    linear = np.ones(k * n)  # @linear
    return square, linear


kept = build(n, k)
print("held", sum(a.nbytes for a in kept))
