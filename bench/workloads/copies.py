"""copies: a known line copying a known volume, beside a smaller copying line.

Stresses: copy attribution (memcpy/memmove volume per line). Each round copies a 64 MiB
float64 array into a preallocated one with np.copyto (contiguous, same dtype: numpy calls
memcpy/memmove) and takes a 16 MiB slice of a bytes object (CPython copies the slice with
memcpy). Neither line allocates in the copy itself beyond the slice's new bytes object.

Known truth (by construction; default size N = 128 rounds):
  - the `@copy` line copies N x 64 MiB = 8 GiB (8,589,934,592 bytes) with the default;
  - the slicing line copies N x 16 MiB = 2 GiB: a quarter of the `@copy` line;
  - peak extra heap over N = 0: one 16 MiB slice (16,777,216 bytes + a 33-byte header); the
    two 64 MiB arrays and the 16 MiB blob are allocated even with N = 0;
  - CPU time is spent in memcpy (libc): mlprof counts libc time as Python time, other
    profilers may count it as native;
  - without numpy the script prints "skipped: numpy not installed" and exits 0.

Usage: python copies.py [N]
"""

import sys

try:
    import numpy as np
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

MIB = 2**20
ARRAY_BYTES = 64 * MIB
SLICE_BYTES = 16 * MIB
EXPECTED_PEAK_BYTES = SLICE_BYTES


def run(rounds):
    src = np.ones(ARRAY_BYTES // 8)
    dst = np.empty_like(src)
    dst.fill(0.0)  # touch the pages before timing-relevant copies
    blob = bytes(range(256)) * (SLICE_BYTES // 256 + 1)
    total = 0
    for i in range(rounds):
        np.copyto(dst, src)  # @copy
        part = blob[i % 7 : i % 7 + SLICE_BYTES]  # 16 MiB copied into a new bytes object
        total += part[-1] + int(dst[i])
        del part
    return total


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    print(f"copies rounds={rounds} total={run(rounds)}")


if __name__ == "__main__":
    main()
