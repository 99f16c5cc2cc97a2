"""Short-lived threads, started without a pause: each spins for a few milliseconds, sleeps
between 10 ms and a longest nap (argument 2, default 1.5 s) and ends; up to 60 alive at any
time, dozens started a second (for `mlprof attach`). Argument 1: seconds."""
import random
import sys
import threading
import time

deadline = time.monotonic() + float(sys.argv[1])
longest = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5
alive = 60


def work():
    end = time.monotonic() + 0.005
    n = 0
    while time.monotonic() < end:
        n += 1  # @work
    time.sleep(random.uniform(0.01, longest))


print("ready", flush=True)
started = 0
while time.monotonic() < deadline:
    if threading.active_count() <= alive:
        threading.Thread(target=work).start()  # @start
        started += 1
    else:
        time.sleep(0.001)
print("done", started, flush=True)
