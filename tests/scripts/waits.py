"""Waits timed under load: while busy threads keep every core occupied (numpy matmuls in
cpu_count + 1 threads, one BLAS thread each), the main thread sleeps 40 x 10 ms at one line and
waits 40 x 5 ms in select() at another. Under load the collector's looks come late and
unevenly, so only waits the program times itself come out right. Then, alone, a loop of
20 us select() calls for 1 s. All the while a daemon thread waits in select() with no
timeout, still waiting when the process exits. Prints what it measured: {"sleep": wall seconds
of the sleep line, "select": of the select line, "short": of the short-wait loop, "parked": how
long the daemon thread had waited when this was printed}.

Lines are found by their `# @marker` comments. Run with OPENBLAS_NUM_THREADS=1.
"""
import json
import os
import select
import threading
import time

import numpy as np

stop = threading.Event()


def busy():
    # Large enough (~10 ms a product) that the workers take the GIL rarely: the main thread
    # meets CPU load, not GIL contention (its waits for the GIL after a call are not timed).
    a = np.random.default_rng(0).standard_normal((400, 400))
    while not stop.is_set():
        a @ a


def parked(started):
    r, _ = os.pipe()
    started.append(time.perf_counter())
    select.select([r], [], [])  # @parked


def main():
    started = []
    threading.Thread(target=parked, args=(started,), daemon=True).start()
    workers = [threading.Thread(target=busy) for _ in range((os.cpu_count() or 1) + 1)]
    for w in workers:
        w.start()
    time.sleep(0.2)  # the workers are running
    slept = waited = 0.0
    for _ in range(40):
        t = time.perf_counter()
        time.sleep(0.01)  # @sleep
        slept += time.perf_counter() - t
        t = time.perf_counter()
        select.select([], [], [], 0.005)  # @select
        waited += time.perf_counter() - t
    stop.set()
    for w in workers:
        w.join()
    # Waits far shorter than the collector's tick, on an idle machine: the loop's two lines
    # take its wall time, part CPU (a quarter of each call is spent in the kernel) and part
    # waiting, neither counted twice.
    r, _ = os.pipe()
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:  # @short-loop
        select.select([r], [], [], 0.00002)  # @short
    short = time.perf_counter() - t
    parked_s = time.perf_counter() - started[0]
    print(json.dumps({"sleep": slept, "select": waited, "short": short, "parked": parked_s}))


main()
