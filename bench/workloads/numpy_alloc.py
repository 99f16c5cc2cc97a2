"""numpy_alloc: large numpy allocations, freed and kept.

Stresses: large (mmap-backed) allocations and frees, RSS that rises and falls by tens of MB,
and peak attribution. Each round allocates a 50 MiB float64 array filled with ones (so the
pages are really touched), derives a second 50 MiB array from it, and drops both - except
every 10th round, whose first array is kept until the end.

Known truth (by construction; default size N = 40 rounds):
  - 2 * N arrays of exactly 52,428,800 bytes (50 MiB) are allocated (plus numpy's small
    objects); the arrays of rounds 0, 10, 20, ... (ceil(N / 10) of them: 4 = 200 MiB with
    the default) are kept until exit, all allocated by the line `arr = np.ones(...)`;
  - peak heap: the kept arrays + the round's two live arrays. With the default it is
    200 MiB + 100 MiB = 300 MiB (314,572,800 bytes of array data), first reached in round 31
    at `doubled = arr * 2.0` and reached again in every later round;
  - the kept set grows in steps (one 50 MiB step every 10 rounds): a "leak-like" ramp that
    is intentional and reachable;
  - at the peak the `@peak` line (`arr = np.ones(...)`) holds 250 MiB (the kept arrays and
    the round's `arr`), `doubled = arr * 2.0` the other 50 MiB;
  - most time is the kernel zeroing and faulting in fresh pages (system time);
  - without numpy the script prints "skipped: numpy not installed" and exits 0.

Usage: python numpy_alloc.py [N]
"""

import sys

try:
    import numpy as np
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

ARRAY_BYTES = 50 * 1024 * 1024
ELEMS = ARRAY_BYTES // 8
# Array data live at the peak beyond N = 0, for any N >= 31 (the default is 40).
EXPECTED_PEAK_BYTES = 6 * ARRAY_BYTES


def run(rounds):
    kept = []
    checksum = 0.0
    for i in range(rounds):
        arr = np.ones(ELEMS, dtype=np.float64)  # @peak
        doubled = arr * 2.0  # another 50 MiB
        checksum += float(doubled[-1])
        if i % 10 == 0:
            kept.append(arr)  # kept: N / 10 arrays of 50 MiB
        del arr, doubled
    return checksum, kept


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    checksum, kept = run(rounds)
    print(f"numpy_alloc rounds={rounds} checksum={checksum} kept={len(kept)} x 50 MiB")


if __name__ == "__main__":
    main()
