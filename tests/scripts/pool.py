"""A pool of 4 workers (argv[2]: start method, fork or spawn; fork by default); each task
keeps argv[1] MB in its worker until the pool ends. Prints {worker pid: tasks run} as JSON:
each worker's heap grows by that much per task, over the pool's own baseline (the same run
with 0 MB)."""
import json
import multiprocessing as mp
import os
import sys
import time

import numpy as np

KEPT = []


def task(_):
    KEPT.append(np.ones(int(sys.argv[1]) * 10**6, dtype=np.uint8))  # @worker-alloc
    time.sleep(0.3)
    return os.getpid()


if __name__ == "__main__":
    method = sys.argv[2] if len(sys.argv) > 2 else "fork"
    with mp.get_context(method).Pool(4) as pool:
        pids = pool.map(task, range(4), chunksize=1)
    print(json.dumps({str(p): pids.count(p) for p in set(pids)}))
