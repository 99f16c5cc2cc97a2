"""An asyncio server whose event loop idles for 1 s (in epoll, off CPU), then a line that fills
fresh arrays (the kernel's time on their page faults). Known truth: the `asyncio.run` line
waits about 1 s and uses almost no CPU; the filling line uses CPU, a good part of it the
kernel's on page faults, and waits for nothing."""
import asyncio
import sys

import numpy as np


async def main():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    async with server:
        await asyncio.sleep(1.0)


asyncio.run(main())  # @idle_loop
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 12
for _ in range(rounds):
    a = np.ones(16 * 2**20)  # @faults
    del a
print("done")
