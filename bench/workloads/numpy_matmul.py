"""numpy_matmul: numpy/BLAS-heavy work, time spent in native code outside the interpreter.

Stresses: the profiler's cost (and its CPU attribution) when almost all time is in BLAS
threads, with a modest number of large allocations. Each round multiplies two 1000x1000
float64 matrices (8 MB each; the result is a fresh 8 MB array) and adds a freshly allocated
random matrix, then drops the temporaries.

Known truth (by construction; default size N = 24 rounds):
  - most CPU time is native (BLAS `matmul`) in the line `c = a @ b` (`@native`), possibly
    on several BLAS threads;
  - each round allocates about 3 arrays of 8,000,000 bytes (matmul result, random matrix,
    sum) and frees them in the same round; `a` and `b` (16 MB) stay live for the whole run;
  - peak heap is about 40 MB of array data: a and b (16 MB) + c, noise and d (24 MB), all
    live together at `d = c + noise` in every round, plus numpy's own import overhead;
    beyond what N = 0 holds (a and b), that is the 24,000,000 bytes of c, noise and d. A
    64x64 warm-up product runs first with any N, so that the buffers BLAS maps on its first
    call (OpenBLAS: tens of MiB, with mmap) are part of the N = 0 baseline too;
  - without numpy the script prints "skipped: numpy not installed" and exits 0.

Usage: python numpy_matmul.py [N]
"""

import sys

try:
    import numpy as np
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

ARRAY_BYTES = 1000 * 1000 * 8
EXPECTED_PEAK_BYTES = 3 * ARRAY_BYTES  # c, noise and d (a and b are there with N = 0 too)


def run(rounds, size=1000):
    warm = np.ones((64, 64))
    warm @ warm  # BLAS sets up its threads and buffers here, also with N = 0
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size))  # kept: 8 MB
    b = rng.standard_normal((size, size))  # kept: 8 MB
    total = 0.0
    for _ in range(rounds):
        c = a @ b  # @native
        noise = rng.standard_normal((size, size))  # allocates 8 MB
        d = c + noise  # allocates 8 MB
        total += float(d[0, 0])
        del c, noise, d
    return total


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    print(f"numpy_matmul rounds={rounds} total={run(rounds):.6f}")


if __name__ == "__main__":
    main()
