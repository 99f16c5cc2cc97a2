"""numpy copying a 152 MB array 30 times: the work is libc's `memcpy`, called by numpy, and
the kernel's page faults of each fresh copy. Known truth: the `@copy` line is native work and
system time, not Python (its time was 65% "Python" when libc was classed with the interpreter
whoever called it); its system time is the kernel time of the loop, which the script measures
itself (`getrusage`) and prints on stderr as `kernel S`."""
import resource
import sys

import numpy as np

a = np.ones(19_000_000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
for _ in range(30):
    b = a.copy()  # @copy
    del b
kernel = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before
print("kernel %.3f" % kernel, file=sys.stderr, flush=True)
print("copied", flush=True)
