"""pure_python: CPU-bound pure-Python arithmetic with (almost) no allocations.

Stresses: CPU sampling and the cost of the profiler on an interpreter that is busy but
barely calls malloc. The loop iterates with itertools.repeat (which yields the same None
object, allocating nothing) and only computes on ints below 256, which CPython caches, so
the main loop performs essentially zero heap allocations. The helper call costs a frame,
which CPython 3.11+ takes from its own frame stack, not from malloc.

Known truth (by construction; default size N = 12_000_000 iterations):
  - ~100% of CPU time is Python time in `spin` and `step` (the loop line and the helper;
    the helper's line is marked `@python`);
    no native/BLAS time, no system time to speak of;
  - the live heap stays flat after start-up: the allocation count of the run is about the
    same as that of an empty script (interpreter start-up and import only);
  - single thread, single process.

Usage: python pure_python.py [N]
"""

import itertools
import sys


def step(a, b):
    return (a * 31 + b) & 0xFF  # @python


def spin(n):
    acc = 1
    x = 7
    for _ in itertools.repeat(None, n):
        acc = step(acc, x)
        x = (x + acc + 1) & 0x7F
    return acc


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 12_000_000
    print(f"pure_python n={n} result={spin(n)}")


if __name__ == "__main__":
    main()
