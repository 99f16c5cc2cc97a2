"""Six helper threads idle in `queue.get()` while the main thread computes for 1 s of CPU;
then the main thread puts one item per helper and joins them. Known truth: the compute line
holds the process's CPU; the helpers' waiting holds nothing up while the main thread computes
(then they only wait on their `get` line)."""
import queue
import threading
import time

jobs = queue.Queue()


def helper():
    while True:
        item = jobs.get()  # @get
        if item is None:
            return


def compute(seconds):
    total, end = 0, time.thread_time() + seconds
    while time.thread_time() < end:
        total += sum(i * i for i in range(1000))  # @compute
    return total


threads = [threading.Thread(target=helper) for _ in range(6)]
for t in threads:
    t.start()
compute(1.0)
for _ in threads:
    jobs.put(None)
for t in threads:
    t.join()  # @join
print("done")
