"""32 fork children, each running 8 threads that allocate and free concurrently (Python
objects and buffers of assorted sizes). Ground truth: 32 children, each exiting 0."""
import os
import threading


def churn(seed):
    keep = []
    for i in range(4000):
        keep.append(bytearray((i * 37 + seed) % 5000 + 1))
        keep.append(str(i) * ((i + seed) % 7))
        if len(keep) > 64:
            keep = keep[32:]


children = []
for c in range(32):
    pid = os.fork()
    if pid == 0:
        threads = [threading.Thread(target=churn, args=(c * 8 + t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        os._exit(0)
    children.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
print("children", len(codes), "failed", sum(1 for c in codes if c != 0))
