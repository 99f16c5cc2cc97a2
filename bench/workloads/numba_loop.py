"""numba_loop: a numba `@njit` loop calling libm's `pow`.

Stresses: code generated at run time (numba's LLVM JIT, outside every mapped file) and libm
called from it, which a profiler that classes libm with the interpreter counts as Python.

Known truth (default size calls = 10):
  - `f` runs a dependent chain of multiply-adds and one `pow` per element of a 2M-float array:
    the `@native` line is JIT code and libm, all native;
  - with calls = 0 the script compiles `f` on a tiny array only (the baseline);
  - without numba it prints "skipped: numba not installed" and exits 0.

Usage: python numba_loop.py [calls]
"""

import sys

try:
    import numpy as np
    from numba import njit
except ImportError:
    print("skipped: numba not installed")
    sys.exit(0)


@njit
def f(x):
    s = 0.0
    y = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 1.37
        for _ in range(16):
            y = y * 0.999 + x[i]
    return s + y


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    x = np.random.default_rng(0).random(2_000_000) + 0.5
    f(x[:10])
    t = 0.0
    for _ in range(calls):
        t += f(x)  # @native
    print(f"numba_loop calls={calls} {round(t)}")


if __name__ == "__main__":
    main()
