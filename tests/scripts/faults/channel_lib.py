"""Shared by the channel_*.py fault scripts: find this process's own mlprof channel file, and
burn CPU in a way that prints the same thing with and without mlprof."""
import os
import time


def own_channel():
    """Path of this process's channel (`<pid>.<start_ns>.ring` in $MLPROF_DIR), or None when
    not profiled."""
    d = os.environ.get("MLPROF_DIR")
    if not d:
        return None
    prefix = "%d." % os.getpid()
    names = [n for n in os.listdir(d) if n.startswith(prefix) and n.endswith(".ring")]
    if not names:
        return None
    names.sort(key=lambda n: int(n.split(".")[1]))
    return os.path.join(d, names[-1])


def layout():
    """Offsets of the channel header passed by the test (MLPROF_TEST_LAYOUT=k=v,...)."""
    raw = os.environ.get("MLPROF_TEST_LAYOUT", "")
    return {k: int(v) for k, v in (kv.split("=") for kv in raw.split(",") if kv)}


def spin(seconds):
    """Burn `seconds` of CPU time; returns a checksum that does not depend on the timing."""
    end = time.process_time() + seconds
    total = 0
    while time.process_time() < end:
        for i in range(1000):
            total = (total + i * i) % 1000003
    return 0


def work():
    """A deterministic result to print."""
    return sum(i * i for i in range(100000)) % 1000003
