"""A command that leaves a child running after it exits (an orphan).

argv: parent SECONDS OUTDIR: start a child in a new session that outlives this process, then
exit at once. The child (argv: child SECONDS OUTDIR) keeps 50 MB on the @orphan-alloc line,
sleeps SECONDS, then runs a program (sh) and writes OUTDIR/done; its stderr goes to
OUTDIR/stderr, which must stay empty.
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
    subprocess.run(["sh", "-c", "echo ran > \"$0\"/done", outdir], check=True)
