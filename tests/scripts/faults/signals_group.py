"""Signals sent to the whole process group (as `timeout`, job schedulers and `kill -- -PGID`
do) must reach the program once each, as without mlprof. The handlers count receipts; the
program must also see its own handlers when it asks for them."""
import os
import signal
import sys
import time

counts = {"TERM": 0, "USR1": 0, "HUP": 0}


def on(name):
    def handler(signum, frame):
        counts[name] += 1

    return handler


signal.signal(signal.SIGTERM, on("TERM"))
signal.signal(signal.SIGUSR1, on("USR1"))
signal.signal(signal.SIGHUP, on("HUP"))
print("own handlers:", signal.getsignal(signal.SIGTERM).__name__)


def settle(seconds):
    # Long enough for a forwarded duplicate to arrive; on-CPU half the time.
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(0.01)
        sum(range(10000))


os.killpg(os.getpgrp(), signal.SIGTERM)
settle(1.0)
os.killpg(os.getpgrp(), signal.SIGUSR1)
settle(1.0)
os.kill(os.getpid(), signal.SIGHUP)  # to the program alone
settle(0.5)
print("received:", counts)
sys.exit(0)
