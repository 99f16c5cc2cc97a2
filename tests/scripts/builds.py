"""The test script of tests/e2e/interpreters.rs, for every CPython build: a pure-Python loop (on
the main thread and on a worker thread at once), a matrix product in BLAS, 60,000 bytes objects
of 1,000 bytes kept to the end, and a sleep. Line numbers are read by the test from the
`# LINE:` comments."""
import sys
import threading
import time

import numpy as np


def spin(n):
    x = 0
    for i in range(n):
        x += i % 7  # LINE: loop
    return x


def product():
    a = np.ones((1000, 1000))
    for _ in range(4):
        a = a @ a / 1000.0  # LINE: blas
    return a


keep = [bytes(1000) for _ in range(60_000)]  # LINE: keep
worker = threading.Thread(target=spin, args=(int(sys.argv[1]),), name="worker")
worker.start()
spin(int(sys.argv[1]))
product()
worker.join()
time.sleep(0.4)  # LINE: sleep
print(len(keep))
