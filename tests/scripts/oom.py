"""Grow until a memory limit stops the process: 20 MB numpy chunks kept on one line.

argv[1]: "grow" (until the limit) or "probe" (print this process's VmSize in KiB after the
imports, for setting an address-space limit). Under a cgroup memory limit the kernel's OOM
killer ends the process with SIGKILL; under an address-space limit (ulimit -v) numpy raises
MemoryError and Python exits with status 1. Either way the line marked @grow holds the memory.
"""
import sys

import numpy as np

if sys.argv[1] == "probe":
    with open("/proc/self/status") as status:
        print(next(l.split()[1] for l in status if l.startswith("VmSize:")))
    sys.exit(0)

kept = []
while True:
    kept.append(np.ones(20 * 10**6, dtype=np.uint8))  # @grow
