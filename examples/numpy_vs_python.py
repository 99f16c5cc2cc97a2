"""The same computation written as a Python loop and with numpy.

Run:
    mlprof run -- python examples/numpy_vs_python.py

What the report should show:
  - the two lines of `python_loop` (`for x in values:` and `total += x * x`) at 100% Python
    time, together roughly 0.1 s for one pass over 3 million floats;
  - the `np.dot(values, values)` line in `vectorised` all native time, with the BLAS
    function under it (`ddot`-like kernels, `exec_blas`; some of it on a `<native thread>`
    row when a BLAS helper thread is busy while Python is elsewhere): about as much time as
    the loop, but for 20 passes, so one numpy pass is 10-20x faster than the Python loop;
  - `as_list = data.tolist()` holding 92 MiB of float objects at the peak. mlprof also lists
    it under "Likely leaks": a list built over a stretch of time and kept until exit cannot be
    told from a leak by its allocations alone.
"""
import numpy as np

N = 3_000_000


def python_loop(values):
    total = 0.0
    for x in values:
        total += x * x  # pure Python
    return total


def vectorised(values):
    return float(np.dot(values, values))  # native


if __name__ == "__main__":
    data = np.random.default_rng(0).random(N)
    as_list = data.tolist()
    slow = python_loop(as_list)
    fast = sum(vectorised(data) for _ in range(20)) / 20
    print(f"python loop {slow:.6e}, numpy {fast:.6e}")
