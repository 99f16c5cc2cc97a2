"""Three phases of pure-Python work, each announced through a state file that drives the fake
NVML library (tests/fake-nvml): "idle", then "busy" (the fake reports 80% SM utilisation for
this process), then "grown" while the same line goes on (80% and 2 GiB more GPU memory), then
"after" (0%, memory unchanged). The growth happens while the @busy line runs on both sides of
the switch, so a poll interval that sees it is the busy line's: a helper thread, sleeping
otherwise, makes the switch, so that the main thread never leaves the busy line around it
(when the main thread made it, on a loaded machine the few system calls of the switch took
long enough to take a third of the poll interval's samples, and of the growth).

argv: STATE_FILE SECONDS_PER_PHASE
"""
import os
import sys
import threading
import time

state, seconds = sys.argv[1], float(sys.argv[2])


def announce(word):
    with open(state + ".tmp", "w") as f:
        f.write(word + "\n")
    os.replace(state + ".tmp", state)


n = 0
announce("idle")
end = time.monotonic() + seconds
while time.monotonic() < end: n += 1  # @idle


def announce_later(word, delay):
    time.sleep(delay)
    announce(word)


announce("busy")
grow = threading.Thread(target=announce_later, args=("grown", 0.3 * seconds))
grow.start()
end = time.monotonic() + 1.5 * seconds
while time.monotonic() < end: n += 1  # @busy
grow.join()
announce("after")
end = time.monotonic() + seconds
while time.monotonic() < end: n += 1  # @after
