"""Spins on one line of pure Python for argv[1] seconds (for `mlprof attach`), then says so."""
import sys
import time

print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < deadline: n += 1  # @spin
print("done", n > 0)
