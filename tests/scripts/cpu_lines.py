"""CPU ground truth by construction. argv[1] picks the scenario; each prints a JSON line of
what it measured itself (thread CPU time of each part) so tests compare shares with truth.

Lines are found by their `# @marker` comments. Run with OPENBLAS_NUM_THREADS=1 so BLAS work
stays on the calling thread.
"""
import json
import sys
import threading
import time

import numpy as np


def pure_python(seconds):
    total, deadline = 0, time.thread_time() + seconds
    while time.thread_time() < deadline:
        for i in range(20000):
            total += (i * i) % 7  # @pure-python
    return total


def blas(seconds):
    # Large enough that BLAS, not allocating each 5 MB result, is the line's work.
    a = np.random.default_rng(0).standard_normal((800, 800))
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        a @ a  # @blas


def sleeper(seconds):
    time.sleep(seconds)  # @sleep


def mixed(py_iters, reps):
    a = np.random.default_rng(1).standard_normal((300, 300))
    t0 = time.thread_time()
    s = sum([(i * i) % 7 for i in range(py_iters)])  # @mixed-python
    t1 = time.thread_time()
    for _ in range(reps):
        a @ a  # @mixed-native
    t2 = time.thread_time()
    return s, t1 - t0, t2 - t1


def two_threads(seconds):
    worker = threading.Thread(target=blas, args=(seconds,))
    worker.start()
    pure_python(seconds)
    worker.join()


scenario = sys.argv[1]
if scenario == "lines":
    pure_python(0.6)
    blas(0.6)
    sleeper(0.5)
elif scenario == "mixed":
    # Calibrate so the Python line is ~2/3 and the native line ~1/3 of the function's time.
    _, py_s, nat_s = mixed(200_000, 20)
    py_iters = int(200_000 * 0.8 / py_s)
    reps = max(1, int(20 * 0.4 / nat_s))
    _, py_s, nat_s = mixed(py_iters, reps)
    print(json.dumps({"python_s": py_s, "native_s": nat_s}))
elif scenario == "threads":
    two_threads(1.0)
elif scenario == "pool":
    # Run with OPENBLAS_NUM_THREADS=2: the pool's threads do part of the work of this line.
    # For 1.5 s of the process's CPU (all its threads), not of wall time: on a loaded machine
    # the line still holds far more native time than the imports before it.
    a = np.random.default_rng(2).standard_normal((600, 600))
    deadline = time.process_time() + 1.5
    while time.process_time() < deadline:
        a @ a  # @pool
elif scenario == "spin":
    # Run with OPENBLAS_NUM_THREADS=2: after each product the pool's thread spins on for a
    # while (up to ~0.1 s) while this thread already sleeps. Products long enough (~0.1 s)
    # that this thread is sampled in each: a pool's work is joined to the line this thread
    # was seen on.
    a = np.random.default_rng(3).standard_normal((1200, 1200))
    for _ in range(8):
        a @ a  # @spin-product
        time.sleep(0.1)  # @spin-sleep
