"""Grows a list in phases for SECONDS (default 8): each of 16 phases keeps 4 MiB more of
bytearrays, then computes until the phase's share of the time is up. Counts the SIGUSR1s it
receives and prints `ready` once its handler is installed and `usr1: N` at the end. For
`mlprof run --snapshot-every` / `--snapshot-on-signal` (tests/e2e/snapshot.rs).

argv: [SECONDS [REPORT]]: with REPORT (the `-o` file), it also looks at that file every 0.1 s
and, after its phases, waits (idle, at most 60 s) until it has seen 4 different files there:
snapshots are written at low priority, and on a machine busier than its cores they come as
often as the machine lets them, not every second."""

import os
import signal
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
report = sys.argv[2] if len(sys.argv) > 2 else None
received = 0
snapshots = set()
looked = 0.0


def look():
    """Note the report file's inode (each snapshot is a new file renamed over the last)."""
    global looked
    if report is None or time.monotonic() - looked < 0.1:
        return
    looked = time.monotonic()
    try:
        snapshots.add(os.stat(report).st_ino)
    except OSError:
        pass


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
        look()
deadline = time.monotonic() + 60
while report is not None and len(snapshots) < 4 and time.monotonic() < deadline:
    time.sleep(0.1)
    look()
print(f"usr1: {received}", flush=True)
