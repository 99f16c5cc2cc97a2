"""Waits timed under load: while busy threads keep every core occupied (numpy matmuls in
cpu_count + 1 threads, one BLAS thread each), the main thread sleeps 40 x 10 ms at one line and
waits 40 x 5 ms in select() at another. Under load the collector's looks come late and
unevenly, so only waits the program times itself come out right. Then, alone, a loop of
20 us select() calls for 1 s. All the while a daemon thread waits in select() with no
timeout, still waiting when the process exits. Prints what it measured: {"sleep": wall seconds
of the sleep line, "select": of the select line, "short": of the short-wait loop, "parked": how
long the daemon thread had waited when this was printed}, and for each of the first three, under
"<name>_runnable", the seconds the kernel says the main thread spent runnable but not running in
those intervals (its run-queue delay, from /proc/thread-self/schedstat; null where the kernel
does not keep it): time that is neither CPU nor waiting, which no profiler line holds.

Lines are found by their `# @marker` comments. Run with OPENBLAS_NUM_THREADS=1.
"""
import json
import os
import select
import threading
import time

import numpy as np

stop = threading.Event()


def runnable():
    """Seconds this thread has spent runnable but not running, as the kernel counts them."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def add(total, before, after):
    if total is None or before is None or after is None:
        return None
    return total + after - before


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
    slept_rq = waited_rq = 0.0
    for _ in range(40):
        q = runnable()
        t = time.perf_counter()
        time.sleep(0.01)  # @sleep
        slept += time.perf_counter() - t
        slept_rq = add(slept_rq, q, runnable())
        q = runnable()
        t = time.perf_counter()
        select.select([], [], [], 0.005)  # @select
        waited += time.perf_counter() - t
        waited_rq = add(waited_rq, q, runnable())
    stop.set()
    for w in workers:
        w.join()
    # Waits far shorter than the collector's tick, on an idle machine: the loop's two lines
    # take its wall time, part CPU (a quarter of each call is spent in the kernel) and part
    # waiting, neither counted twice.
    r, _ = os.pipe()
    q = runnable()
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:  # @short-loop
        select.select([r], [], [], 0.00002)  # @short
    short = time.perf_counter() - t
    short_rq = add(0.0, q, runnable())
    parked_s = time.perf_counter() - started[0]
    print(
        json.dumps(
            {
                "sleep": slept,
                "select": waited,
                "short": short,
                "parked": parked_s,
                "sleep_runnable": slept_rq,
                "select_runnable": waited_rq,
                "short_runnable": short_rq,
            }
        )
    )


main()
