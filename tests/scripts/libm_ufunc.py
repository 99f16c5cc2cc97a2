"""A numpy ufunc whose loop calls libm for each element (`np.sin` on float64: glibc's
`__sin_fma`, which keeps doubles on the stack below its return address), for 0.6 s of the
thread's CPU. Known truth: the line is native time (libm called by numpy), not Python's."""
import time

import numpy as np

big = np.linspace(0.0, 1.0, 1_000_000)
out = np.empty_like(big)
end = time.thread_time() + 0.6
while time.thread_time() < end:
    np.sin(big, out=out)  # @sin
print("done")
