"""numpy copying a 152 MB array 30 times: the work is libc's `memcpy`, called by numpy (and
the page faults of the fresh copy). Known truth: the `@copy` line is native work, not Python
(its time was 65% "Python" when libc was classed with the interpreter whoever called it)."""
import numpy as np

a = np.ones(19_000_000)
for _ in range(30):
    b = a.copy()  # @copy
    del b
print("copied", flush=True)
