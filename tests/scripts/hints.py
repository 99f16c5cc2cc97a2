"""Workloads that must, and must not, trigger each hint.

    python hints.py MODE

copies    a loop copying an array it already has (`np.array(x)`): 800 MB copied, every
          allocated byte a copy                                    -> "copies"
inplace   the same loop made in place (`np.multiply(x, 1.0, out=y)`): nothing copied
float64   a 256 MB float64 array held at the peak                  -> "float64"
float32   the same array made float32
objects   3 million floats in a list held at the peak              -> "python_objects"
array     the same numbers in one numpy array
keep      a list that keeps a 4 MB array per step, 40 steps        -> "growing"
bounded   the same steps keeping only a float per step
"""
import sys
import time

import numpy as np

mode = sys.argv[1]
MB = 1 << 20

if mode == "copies":
    x = np.ones(8 * MB // 8)
    for _ in range(100):
        y = np.array(x)  # @copies
elif mode == "inplace":
    x = np.ones(8 * MB // 8)
    y = np.empty_like(x)
    for _ in range(100):
        np.multiply(x, 1.0, out=y)  # @inplace
elif mode == "float64":
    big = np.ones((4096, 8192))  # @float64
    print(float(big[0, 0]))
elif mode == "float32":
    big = np.ones((4096, 8192), dtype=np.float32)  # @float32
    print(float(big[0, 0]))
elif mode == "objects":
    values = [float(i) for i in range(3_000_000)]  # @objects
    print(len(values))
elif mode == "array":
    values = np.arange(3_000_000, dtype=np.float64)  # @array
    print(len(values))
elif mode in ("keep", "bounded"):
    kept = []
    for step in range(40):
        batch = np.full(MB // 2, float(step))  # @batch
        if mode == "keep":
            kept.append(batch)  # @keep
        else:
            kept.append(float(batch.sum()))
        time.sleep(0.02)
    print(len(kept))
else:
    sys.exit(f"unknown mode {mode}")
