"""numpy copies that never reach memcpy: a transposed view made contiguous, a dtype cast and a
fancy-index gather, each on its own line, and a ufunc writing into an existing array, which
copies nothing. Each phase runs for
0.4 s of the thread's CPU (not wall time: a busy machine does not shrink it)."""
import time

import numpy as np

big = np.ones((1000, 1000))
v = np.arange(2_000_000, dtype=np.float64)
perm = np.random.default_rng(0).permutation(2_000_000)
out = np.empty((1000, 1000))


def phase(step):
    end = time.thread_time() + 0.4
    while time.thread_time() < end:
        step()


def transpose():
    np.ascontiguousarray(big.T)  # @transpose


def cast():
    big.astype(np.float32)  # @astype


def gather():
    v[perm]  # @gather


def compute():
    np.multiply(big, 3.0, out=out)  # @ufunc


for step in (transpose, cast, gather, compute):
    phase(step)
print("done")
