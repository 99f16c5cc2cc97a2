"""Two threads' regions that do not nest by time: A opens, B opens inside it, A ends first, B
goes on. Each region's exact peak is known by construction: A 40 MiB (before B began), B 30 MiB
(20 MiB while A was open, 10 MiB more after A ended)."""
import threading

import numpy as np

from mlprof import Region

MIB = 2**20
a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
regions = {}


def thread_b():
    a_open.wait()
    b = Region("b").begin()
    x = np.ones(20 * MIB // 8)
    b_open.set()
    a_closed.wait()
    y = np.ones(10 * MIB // 8)
    del x, y
    regions["b"] = b.end()


t = threading.Thread(target=thread_b)
t.start()
a = Region("a").begin()
big = np.ones(40 * MIB // 8)
del big
a_open.set()
b_open.wait()
regions["a"] = a.end()
a_closed.set()
t.join()
after = Region("after").begin()
kept = np.ones(5 * MIB // 8)
after.end()
print(regions["a"].peak, regions["b"].peak, after.peak)
