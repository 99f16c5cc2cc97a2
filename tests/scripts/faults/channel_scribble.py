"""Scribble over this process's own channel file while it runs (argv: MODE SEED), then go on
working and exit 3. Modes: random (the whole file), ring (random spans after the header), head
(a huge head position), slots (a huge slot count), deep (a sample claiming 2^32-1 frames and a
code object claiming a 1 TiB line table, published in the ring). Prints the same thing with
and without mlprof."""
import mmap
import os
import random
import signal
import struct
import sys

from channel_lib import layout, own_channel, spin, work

mode, seed = sys.argv[1], int(sys.argv[2])
print("start", flush=True)
spin(0.15)
path = own_channel()
if path is not None:
    lay = layout()
    rng = random.Random(seed)
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDWR)
    if mode == "random":
        os.pwrite(fd, bytes(rng.getrandbits(8) for _ in range(size)), 0)
    elif mode == "ring":
        for _ in range(20):
            at = rng.randrange(lay["header"], size - 64)
            os.pwrite(fd, bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64))), at)
    elif mode == "head":
        os.pwrite(fd, struct.pack("<Q", (1 << 62) + rng.randrange(1 << 20)), lay["head"])
    elif mode == "slots":
        os.pwrite(fd, struct.pack("<Q", 1 << 58), lay["slots"])
    elif mode == "deep":
        m = mmap.mmap(fd, size)
        slots = struct.unpack_from("<Q", m, lay["slots"])[0]
        # Our own sampler must not write while we publish (it runs in this thread).
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPROF])
        head = struct.unpack_from("<Q", m, lay["head"])[0]
        sample = struct.pack("<HHIQQQQQQ", 3, 0, 1, 0, 0xdead, 1000, 0xFFFFFFFF, 0, 0)
        code = struct.pack("<HHIQQQQQQ", 5, 0, 1, 0, 1, 1 | 1 << 32 | 1 << 40, 0, 1 << 40, 0)
        for i, rec in enumerate([sample, code]):
            at = lay["header"] + ((head + i) % slots) * 64
            m[at + 8:at + 64] = rec
            m[at:at + 8] = struct.pack("<Q", head + i + 1)
        m[lay["head"]:lay["head"] + 8] = struct.pack("<Q", head + 2)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGPROF])
        m.close()
    os.close(fd)
spin(0.15)
print("result", work(), flush=True)
sys.exit(3)
