"""Three phases of pure-Python work, each announced through a state file that drives the fake
NVML library (tests/fake-nvml): "idle", then "busy" (the fake reports 80% SM utilisation for
this process), then "grown" while the same line goes on (80% and 2 GiB more GPU memory), then
"after" (0%, memory unchanged). The growth happens while the @busy line runs on both sides of
the switch, so a poll interval that sees it is the busy line's.

argv: STATE_FILE SECONDS_PER_PHASE
"""
import os
import sys
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
for word, share in (("busy", 0.3), ("grown", 1.2)):
    announce(word)
    end = time.monotonic() + share * seconds
    while time.monotonic() < end: n += 1  # @busy
announce("after")
end = time.monotonic() + seconds
while time.monotonic() < end: n += 1  # @after
