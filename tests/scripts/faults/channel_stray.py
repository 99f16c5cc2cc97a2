"""Leave stray files named *.ring in the channel directory (garbage, empty, too short, a
directory), then work and exit 0. Prints the same thing with and without mlprof."""
import os
import random

from channel_lib import spin, work

d = os.environ.get("MLPROF_DIR")
if d:
    rng = random.Random(7)
    with open(os.path.join(d, "garbage.ring"), "wb") as f:
        f.write(bytes(rng.getrandbits(8) for _ in range(100000)))
    open(os.path.join(d, "x.ring"), "wb").close()
    with open(os.path.join(d, "short.ring"), "wb") as f:
        f.write(b"MLPROFw\0")
    os.mkdir(os.path.join(d, "dir.ring"))
spin(0.3)
print("result", work(), flush=True)
