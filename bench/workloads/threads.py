"""threads: four threads running pure Python plus one thread running numpy.

Stresses: per-thread sampling and attribution under the GIL. Four threads run the same
pure-Python loop (they take turns on the GIL, so together they get at most one core); a
fifth thread multiplies matrices with numpy, which releases the GIL inside BLAS and can run
on another core at the same time.

Known truth (by construction; default size N = 2,000,000 iterations per Python thread):
  - the `@python` line in `py_worker` is (nearly) all Python time, spread evenly over four
    threads (about 4 x N iterations in total);
  - the `@native` line in `np_worker` is (nearly) all native time (BLAS), on the fifth
    thread (and any BLAS helper threads), for N // 20,000 products of 600x600 matrices
    (100 with the default);
  - while the Python threads wait for the GIL they are off the CPU: tools that sample wall
    time show waiting on their lines, tools that sample CPU time do not;
  - memory is flat: the two 600x600 inputs (2.9 MB each) live for the whole run and one
    2.9 MB product at a time;
  - without numpy the script prints "skipped: numpy not installed" and exits 0.

Usage: python threads.py [N]
"""

import sys
import threading

try:
    import numpy as np
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

PY_THREADS = 4
SIZE = 600


def py_worker(n, out, k):
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003  # @python
    out[k] = acc


def np_worker(products, out, k):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((SIZE, SIZE))
    b = rng.standard_normal((SIZE, SIZE))
    total = 0.0
    for _ in range(products):
        c = a @ b  # @native
        total += float(c[0, 0])
    out[k] = total


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    warm = np.ones((64, 64))
    warm @ warm  # BLAS sets up its threads and buffers here, also with N = 0
    out = [None] * (PY_THREADS + 1)
    threads = [threading.Thread(target=py_worker, args=(n, out, k)) for k in range(PY_THREADS)]
    threads.append(threading.Thread(target=np_worker, args=(n // 20_000, out, PY_THREADS)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"threads n={n} results={out[:PY_THREADS]} matmul={out[-1]:.3f}")


if __name__ == "__main__":
    main()
