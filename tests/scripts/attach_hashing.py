"""Threads hash large buffers with the GIL released (hashlib does for more than 2 KiB of data):
beside other busy processes they are runnable far longer than they run (for `mlprof attach`).
They start once a line arrives on stdin, and hash for the given seconds. Arguments: seconds,
threads (default 8)."""
import hashlib
import sys
import threading
import time

seconds = float(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 8
data = bytes(4 << 20)
go = threading.Event()


def work():
    go.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        hashlib.sha256(data).digest()  # @hash


threads = [threading.Thread(target=work) for _ in range(count)]
for t in threads:
    t.start()
print("ready", flush=True)
sys.stdin.readline()
go.set()
for t in threads:
    t.join()
print("done", flush=True)
