"""Tensors on a (fake: tests/fake-torch) CUDA device in a run's snapshots
(`mlprof run --snapshot-every`, tests/e2e/snapshot.rs). The program holds 4 MiB at @parent,
then runs itself as a child (argument `child`) that holds 8 MiB at @child and ends, then prints
the child's pid and waits, idle, until it has seen 4 different report files (argv[1], the `-o`
file; each snapshot is a new file renamed over the last) after the child ended, at most 60 s:
those snapshots were taken while this process ran on and after the child's trace was written."""
import os
import subprocess
import sys
import time

import torch

MIB = 1 << 20

if sys.argv[1:] == ["child"]:
    held = torch.empty(8 * MIB)  # @child
    sys.exit(0)

report = sys.argv[1]
held = torch.empty(4 * MIB)  # @parent
child = subprocess.Popen([sys.executable, __file__, "child"])
child.wait()
print(f"child {child.pid} {child.returncode}", flush=True)
seen = set()
deadline = time.monotonic() + 60
while len(seen) < 4 and time.monotonic() < deadline:
    try:
        seen.add(os.stat(report).st_ino)
    except OSError:
        pass
    time.sleep(0.05)
print(f"snapshots seen: {len(seen)}", flush=True)
