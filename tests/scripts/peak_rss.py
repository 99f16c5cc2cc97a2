"""Runs argv[2:] for at most argv[1] seconds (then kills it) and prints its exit status (or
`timeout`) and peak RSS in KiB. From a small process: the kernel's peak RSS of a child also
counts the memory of the process that spawned it (up to its exec), which for a test harness
can be hundreds of MB."""
import resource
import subprocess
import sys

try:
    status = subprocess.run(sys.argv[2:], timeout=float(sys.argv[1])).returncode
except subprocess.TimeoutExpired:
    status = "timeout"
print(status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
