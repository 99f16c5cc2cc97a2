"""A long allocation-churn job with known truth, for the bounded collector. argv[1]: how long
the churn runs, in seconds of the process's CPU (so that a machine busy with other work does
not shrink it; on an idle one about its wall time); argv[2]: how many bytes a second of CPU it
leaks (default 4 MB).

A 500 MB array is made first and freed 1 s into the churn: the heap peaks then, at baseline +
502 MB (with the 1 MB source and temporary) + what leaked by then, with that array the only
holder. Each iteration of the churn allocates and frees a 1 MB temporary and a batch of small
Python objects, copies 1 MB, does a little pure-Python work, and keeps 64 KB forever whenever
it has leaked less than the rate says (a leak). At the end a 300 MB array is kept and a 100 MB
temporary made and freed (below the early peak while the leak stays under 100 MB). What was
done is printed as JSON on stdout (the test compares it with the profile)."""
import json
import sys
import time

import numpy as np

MB = 10**6
seconds = float(sys.argv[1])
leak_rate = float(sys.argv[2]) if len(sys.argv) > 2 else 4 * MB
early = np.ones(500 * MB, dtype=np.uint8)  # @early
leaked = []
src = np.ones(MB, dtype=np.uint8)
iterations = 0
python_total = 0
leaked_at_peak = 0
start = time.process_time()
while time.process_time() < start + seconds:
    if early is not None and time.process_time() > start + 1:
        early = None
        leaked_at_peak = len(leaked) * 64 * 1000
    tmp = np.ones(MB, dtype=np.uint8)  # @churn
    del tmp
    objs = [str(i) * 3 for i in range(200)]  # @objects
    del objs
    dst = np.copy(src)  # @copy
    del dst
    python_total += sum(i * i for i in range(300))  # @python
    if len(leaked) * 64 * 1000 < (time.process_time() - start) * leak_rate:
        leaked.append(np.ones(64 * 1000, dtype=np.uint8))  # @leak
    iterations += 1
early = None  # runs shorter than 1 s
kept = np.ones(300 * MB, dtype=np.uint8)  # @kept
temp = np.ones(100 * MB, dtype=np.uint8)  # @temp
del temp
print(json.dumps({"iterations": iterations, "leaked_bytes": len(leaked) * 64 * 1000,
                  "leaked_at_peak": leaked_at_peak,
                  "churn_bytes": iterations * MB, "copy_bytes": iterations * MB}))
