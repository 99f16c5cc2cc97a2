"""Most of the time at module level, the way scripts are written: a loop at the top of the
file (about twice the CPU of the function below it) and a buffer it keeps, for the exports'
`<module>` frames. No imports beyond `time`, so the module's own lines dominate.
"""
import time


def helper(seconds):
    total, deadline = 0, time.thread_time() + seconds
    while time.thread_time() < deadline:
        for i in range(5000):
            total += (i * i) % 7  # @function
    return total


kept = bytearray(64 << 20)  # @kept
total, deadline = 0, time.thread_time() + 0.6
while time.thread_time() < deadline:
    for i in range(5000):
        total += (i * i) % 7  # @module
helper(0.3)
print(total + len(kept))
