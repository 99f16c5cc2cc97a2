"""large_arrays: large numpy arrays kept, freed, then a smaller transient one.

Stresses: peak attribution when the biggest single allocation is *not* the peak. Each cycle
keeps four 64 MiB arrays (allocated one after the other on one line and held together),
frees them, then allocates one transient 200 MiB array on another line and frees it.

Known truth (by construction; any size N >= 1 cycles, default 20):
  - peak extra heap over N = 0: the four kept arrays, 4 x 64 MiB = 268,435,456 bytes of array
    data (plus numpy's few hundred bytes of headers), first reached in cycle 0 at the line
    marked `@peak`, and reached again in every cycle;
  - the 200 MiB transient on the `transient = ...` line is the largest single allocation but
    is never live together with the kept arrays, so it holds nothing at the peak: a tool that
    names it as the peak line confuses "largest allocation" with "held at the peak";
  - pages are touched (np.ones / np.full), so RSS follows the heap; most time is the kernel
    faulting in and zeroing pages;
  - nothing leaks: every array is freed within its cycle;
  - without numpy the script prints "skipped: numpy not installed" and exits 0.

Usage: python large_arrays.py [N]
"""

import sys

try:
    import numpy as np
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

MIB = 2**20
KEEP_COUNT = 4
KEEP_BYTES = 64 * MIB
TRANSIENT_BYTES = 200 * MIB
EXPECTED_PEAK_BYTES = KEEP_COUNT * KEEP_BYTES


def cycle():
    kept = []
    for _ in range(KEEP_COUNT):
        kept.append(np.ones(KEEP_BYTES // 8))  # @peak
    checksum = sum(float(k[-1]) for k in kept)
    del kept  # all four freed here
    transient = np.full(TRANSIENT_BYTES // 8, 2.0)  # largest single allocation, not the peak
    checksum += float(transient[-1])
    del transient
    return checksum


def main():
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    checksum = sum(cycle() for _ in range(cycles))
    print(f"large_arrays cycles={cycles} checksum={checksum}")


if __name__ == "__main__":
    main()
