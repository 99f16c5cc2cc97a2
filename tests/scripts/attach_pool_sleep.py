"""For `mlprof attach`: short matrix products on the BLAS pool, each batch followed by a 0.1 s
sleep and a short pure-Python loop, for argv[1] seconds; prints `ready` first. Known truth: the
sleep uses no CPU (the pool spinning on after the products works for them), the products hold
the pool's CPU and their own native time."""
import sys
import time

import numpy as np

x = np.random.default_rng(0).standard_normal((600, 600))
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(3):
        x @ x  # @product
    time.sleep(0.1)  # @sleep
    s = 0
    for i in range(100000):
        s += i % 7  # @pure
