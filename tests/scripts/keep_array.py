"""Allocate and keep SIZE_MB megabytes (10**6 bytes) with numpy, then optionally die.

Ground truth by construction: the heap grows by exactly SIZE_MB * 10**6 bytes (one buffer,
plus allocator rounding) over the baseline of the same script run with SIZE_MB = 0.
argv: SIZE_MB [exit|kill]
"""
import os
import signal
import sys

import numpy as np

size_mb = int(sys.argv[1])
how = sys.argv[2] if len(sys.argv) > 2 else "exit"
# Touched (ones, not empty), so RSS grows too.
kept = np.ones(size_mb * 10**6, dtype=np.uint8)  # @kept
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
print(int(kept.sum()))
