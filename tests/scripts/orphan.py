"""A command that leaves a child running after it exits (an orphan).

argv: parent SECONDS OUTDIR: start a child in a new session that outlives this process, then
exit at once. The child (argv: child SECONDS OUTDIR) keeps 50 MB on the @orphan-alloc line,
sleeps SECONDS, computes for 0.3 s of CPU time, writes how many POSIX timers signal its main
thread (mlprof's sampler arms one per thread while it is profiled) to OUTDIR/timers, then runs a program (sh)
that writes OUTDIR/done; its stderr goes to OUTDIR/stderr, which must stay empty.
"""
import os
import subprocess
import sys
import time

import numpy as np

role, seconds, outdir = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if role == "parent":
    with open(os.path.join(outdir, "stderr"), "wb") as err:
        subprocess.Popen(
            [sys.executable, __file__, "child", str(seconds), outdir],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    print("parent done")
else:
    kept = np.ones(50 * 10**6, dtype=np.uint8)  # @orphan-alloc
    time.sleep(seconds)
    start = time.process_time()
    while time.process_time() - start < 0.3:
        pass
    # Timers that signal this (main) thread: the one that just computed. Idle threads (BLAS
    # pools) keep theirs until they next run, which costs nothing while they sleep.
    with open("/proc/self/timers") as timers:
        count = sum(line.strip() == f"notify: signal/tid.{os.getpid()}" for line in timers)
    with open(os.path.join(outdir, "timers"), "w") as out:
        out.write(str(count))
    subprocess.run(["sh", "-c", "echo ran > \"$0\"/done", outdir], check=True)
