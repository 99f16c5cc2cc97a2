"""Grows a list in phases for SECONDS (default 8): each of 16 phases keeps 4 MiB more of
bytearrays, then computes until the phase's share of the time is up. Counts the SIGUSR1s it
receives and prints `ready` once its handler is installed and `usr1: N` at the end. For
`mlprof run --snapshot-every` / `--snapshot-on-signal` (tests/e2e/snapshot.rs)."""

import signal
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
received = 0


def on_usr1(signum, frame):
    global received
    received += 1


signal.signal(signal.SIGUSR1, on_usr1)
print("ready", flush=True)

PHASES = 16
kept = []
start = time.monotonic()
for phase in range(PHASES):
    kept.extend(bytearray(64 * 1024) for _ in range(64))
    end = start + seconds * (phase + 1) / PHASES
    while time.monotonic() < end:
        sum(range(1000))
print(f"usr1: {received}", flush=True)
