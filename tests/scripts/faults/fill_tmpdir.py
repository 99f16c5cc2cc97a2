"""Fills TMPDIR (a small filesystem) until it refuses more, then forks two children that
allocate and exit, allocates itself, and cleans up: it must run exactly as without mlprof."""
import os
import sys
import tempfile
import time

fills = []
chunk = b"\0" * (256 * 1024)
while True:
    fd, path = tempfile.mkstemp(prefix="fill-")
    fills.append(path)
    try:
        while True:
            os.write(fd, chunk)
    except OSError:
        os.close(fd)
        break
print("TMPDIR is full")
sys.stdout.flush()
children = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        keep = [bytearray(1_000_000) for _ in range(40)]
        os._exit(10 + i + len(keep) // 100)
    children.append(pid)
codes = sorted(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in children)
blocks = [bytearray(1_000_000) for _ in range(50)]
print("children exited", codes, "parent holds", len(blocks), "MB")
time.sleep(0.3)  # still full for a while, as a program that filled its disk would be
for path in fills:
    os.unlink(path)
sys.exit(6)
