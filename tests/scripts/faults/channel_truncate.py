"""Truncate this process's own channel file while it runs (argv: MODE), then go on working and
exit 5. Modes: zero (to 0 bytes and straight back to its size: the contents are lost but the
process's own writes still land in the file), half (to half its size, for good). Prints the
same thing with and without mlprof."""
import os
import signal
import sys

from channel_lib import own_channel, spin, work

mode = sys.argv[1]
print("start", flush=True)
spin(0.15)
path = own_channel()
if path is not None:
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDWR)
    if mode == "zero":
        # The process's own sampler writes into the mapping: keep it out of the short window.
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPROF])
        os.ftruncate(fd, 0)
        os.ftruncate(fd, size)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGPROF])
    else:
        os.ftruncate(fd, size // 2)
    os.close(fd)
spin(0.15)
print("result", work(), flush=True)
sys.exit(5)
