"""A thread pool where some tasks compute in Python, some wait on I/O and one uses numpy.

Run:
    mlprof run -- python examples/threads.py

What the report should show:
  - the `Threads` section with the main thread and four `ThreadPoolExecutor` workers (plus
    BLAS helper threads as `native`): together about 0.5 s of Python time in `checksum`,
    0.4 s of waiting in `fetch`, and about 0.2 s of native time in `matmul_task`; the main
    thread waiting on the `f.result()` line;
  - the loop line in `checksum` almost all Python; the workers running it also show waiting
    time: with the GIL only one thread runs Python at a time, and a thread waiting for the
    GIL is off the CPU;
  - the `time.sleep` line in `fetch` as waiting (the `waiting` column), with no CPU;
  - the `a @ b` line in `matmul_task` as native time (BLAS).
"""
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def checksum(n):
    acc = 0
    for i in range(n):
        acc = (acc * 33 + i) % 1_000_003  # pure Python: holds the GIL
    return acc


def fetch(delay):
    time.sleep(delay)  # stands for a network or disk wait: releases the GIL
    return delay


def matmul_task(size):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size))
    b = rng.standard_normal((size, size))
    total = 0.0
    for _ in range(10):
        total += float((a @ b)[0, 0])  # native: BLAS releases the GIL
    return total


if __name__ == "__main__":
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(checksum, 1_500_000) for _ in range(4)]
        futures += [pool.submit(fetch, 0.1) for _ in range(4)]
        futures.append(pool.submit(matmul_task, 700))
        results = [f.result() for f in futures]
    print("results:", results[:4], "matmul:", round(results[-1], 3))
