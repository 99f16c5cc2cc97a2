"""A numba `@njit` loop calling `pow` (libm) on 2M floats, 20 times, when numba is importable
(else it says it skipped). Known truth: the `@call` line's time is JIT code (a dependent chain
of multiply-adds per element) and libm called from it, native work (py-spy: 73% libm, 27% JIT code); it read 77% Python when libm was classed
with the interpreter whoever called it."""
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
        for _ in range(16):  # a dependent chain: arithmetic in the JIT code itself
            y = y * 0.999 + x[i]
    return s + y


x = np.random.default_rng(0).random(2_000_000) + 0.5
f(x[:10])  # @compile
t = 0.0
for _ in range(20):
    t += f(x)  # @call
print(round(t), flush=True)
