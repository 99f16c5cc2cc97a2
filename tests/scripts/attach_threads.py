"""A worker thread spins on one line while the main thread waits for it (for `mlprof attach`)."""
import sys
import threading
import time


def spin(seconds):
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline: n += 1  # @worker


worker = threading.Thread(target=spin, args=(float(sys.argv[1]),))
worker.start()
print("ready", flush=True)
worker.join()  # @join
print("done")
