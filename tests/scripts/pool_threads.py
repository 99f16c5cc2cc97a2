"""Three Python threads: one multiplies matrices with the BLAS pool (about 0.6 s of its CPU and
the pool's), one runs a pure-Python loop, the main thread waits in `join`. Then, alone, the
main thread runs short products, each followed by a pure-Python loop while the pool is idle
(spinning, then asleep). Known truth: the pool's CPU works for the products; none of it is
the `join` line's or a pure-Python line's."""
import threading
import time

import numpy as np

x = np.random.default_rng(0).standard_normal((600, 600))


def products(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        x @ x  # @product


def pure(seconds):
    s = 0
    end = time.thread_time() + seconds
    i = 0
    while time.thread_time() < end:
        for i in range(2000):
            s += i % 7  # @pure
    return s


a = threading.Thread(target=products, args=(0.6,))
b = threading.Thread(target=pure, args=(0.6,))
a.start()
b.start()
a.join()  # @join
b.join()
for _ in range(6):
    x @ x  # @short_product
    s = 0
    for i in range(300000):
        s += i % 7  # @after
print("done")
