"""mixed_lines: one loop body with a pure-Python line, a native (BLAS) line and a waiting line.

Stresses: the per-line split of time into Python, native and system/waiting. Each round
runs three lines of the same function, one after the other:

  - a generator expression summing 250,000 integers: interpreter time only (`@python`);
  - a 1000x1000 float64 matrix product: BLAS time, possibly on several BLAS threads
    (`@native`);
  - `time.sleep(0.1)`: the thread is off the CPU, waiting (`@system`).

Known truth (by construction; default size N = 10 rounds):
  - the `@python` line is (nearly) all Python time, about 0.1 s per round on a 2-core VM;
  - the `@native` line is (nearly) all native time in BLAS (`dgemm`-like kernels), about
    about 0.1 s of CPU per round;
  - the `@system` line is 0.1 s of waiting per round (1 s with the default) and no CPU;
  - memory is flat: the two 1000x1000 inputs (8 MB each) live for the whole run and each
    product (8 MB) is freed at the end of its round;
  - OpenBLAS's helper threads keep spinning for a while after each product, while the main
    thread is already on the sleep line: a profiler that charges pool threads to the line the
    Python thread is on can show native time on the `@system` line;
  - without numpy the script prints "skipped: numpy not installed" and exits 0.

Usage: python mixed_lines.py [N]
"""

import sys
import time

try:
    import numpy as np
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

SIZE = 1000


def run(rounds):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE))
    b = rng.standard_normal((SIZE, SIZE))
    a[:64, :64] @ b[:64, :64]  # BLAS sets up its threads and buffers here, also with N = 0
    total = 0.0
    for _ in range(rounds):
        total += sum(i * i % 7 for i in range(250_000))  # @python
        c = a @ b  # @native
        time.sleep(0.1)  # @system
        total += float(c[0, 0])
        del c
    return total


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    print(f"mixed_lines rounds={rounds} total={run(rounds):.3f}")


if __name__ == "__main__":
    main()
