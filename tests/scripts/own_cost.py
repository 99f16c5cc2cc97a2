"""A tree that makes a profiler's own reading of /proc costly: eight fork children of a
process that imported numpy (many mapped pages each), each holding 32 MiB it touched, and 64
idle threads in the parent, for about 4 s; the children use 0.4 s of CPU each."""
import os
import threading
import time

import numpy as np

CHILDREN = 8
t0 = time.monotonic()
held = np.ones(4 * 2**20)  # 32 MiB in the parent, shared by the fork children
stop = threading.Event()
idle = [threading.Thread(target=stop.wait) for _ in range(64)]
for t in idle:
    t.start()
pids = []
for i in range(CHILDREN):
    pid = os.fork()
    if pid == 0:
        mine = np.ones(4 * 2**20) * i  # 32 MiB of its own
        end = time.thread_time() + 0.4
        n = 0
        while time.thread_time() < end:
            n += 1
        time.sleep(max(0.0, 4.0 - (time.monotonic() - t0)))
        os._exit(int(mine[0]) % 2)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
stop.set()
for t in idle:
    t.join()
print("children", codes)
