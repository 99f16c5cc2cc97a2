"""mp_pool: a multiprocessing Pool(4) whose tasks each hold a known buffer at the same time.

Stresses: following worker processes (fork by default, `--start spawn` to spawn them;
`mp_pool_spawn.py` is this script with spawn) and adding up memory across a process tree.
Each task allocates a 64 MiB numpy array on the `@peak` line, fills it, waits on a barrier
shared by the four workers (so all four buffers are live together), holds it 0.1 s, then
frees it and returns a checksum. Tasks are handed out one at a time (chunksize 1); a worker
that waits on the barrier takes no other task, so each wave of four tasks runs on the four
distinct workers.

Known truth (by construction; default size N = 8 waves of 4 tasks):
  - peak extra heap over N = 0 of the process tree: 4 x 64 MiB = 268,435,456 bytes of array
    data, held by the four workers together, each on the `@peak` line (a tool that profiles
    only the parent process sees none of it);
  - the parent only waits (`pool.map`): its CPU time is small; the workers' CPU time is
    mostly the kernel faulting in pages and numpy filling them (native);
  - with N = 0 the pool runs one wave of four tasks that allocate nothing (so the workers
    are up, synchronised and hold their own baseline, as with N > 0);
  - without numpy the script prints "skipped: numpy not installed" and exits 0.

Usage: python mp_pool.py [N] [--start fork|spawn]
"""

import multiprocessing as mp
import sys
import time

try:
    import numpy as np
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

WORKERS = 4
TASK_BYTES = 64 * 2**20
EXPECTED_PEAK_BYTES = WORKERS * TASK_BYTES

_barrier = None


def _init(barrier):
    global _barrier
    _barrier = barrier


def task(i, nbytes=TASK_BYTES):
    buf = np.full(nbytes // 8, float(i))  # @peak
    checksum = float(buf[::4096].sum()) if nbytes else 0.0
    _barrier.wait(timeout=60)  # all four buffers are live from here
    time.sleep(0.1)
    del buf
    return checksum


def main(argv=None, start="fork"):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--start" in argv:
        k = argv.index("--start")
        start = argv[k + 1]
        del argv[k : k + 2]
    waves = int(argv[0]) if argv else 8
    ctx = mp.get_context(start)
    barrier = ctx.Barrier(WORKERS)
    with ctx.Pool(WORKERS, initializer=_init, initargs=(barrier,)) as pool:
        if waves > 0:
            sums = pool.map(task, range(waves * WORKERS), chunksize=1)
        else:  # baseline: same pool, same synchronisation, nothing allocated
            sums = pool.starmap(task, [(i, 0) for i in range(WORKERS)], chunksize=1)
    print(f"mp_pool start={start} waves={waves} tasks={len(sums)} checksum={sum(sums)}")


if __name__ == "__main__":
    main()
