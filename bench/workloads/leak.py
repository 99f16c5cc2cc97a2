"""leak: one line leaks into a global list while another allocates as much and frees it.

Stresses: telling a leak from churn. Each iteration handles one "request": it builds a
32 KiB bytes payload that is dropped at the end of the iteration (churn), computes a
checksum over it, and appends a second 32 KiB bytes object to a module-level list that is
never cleared (the leak). Both lines allocate exactly the same bytes.

Known truth (by construction; default size N = 8,000 iterations):
  - the `@leak` line allocates N x 32 KiB (250 MiB with the default) and frees none of it:
    live bytes grow linearly for the whole run, and it holds them all at the peak (`@peak`,
    at the end of the loop);
  - the churn line (`payload = ...`) allocates the same N x 32 KiB, but each payload is
    freed in its own iteration: at most one payload (32 KiB) is live at any time;
  - peak extra heap over N = 0: N x (32 KiB + 33 bytes of bytes-object header) + the list's
    pointer array (about 8 bytes per item) - 262,144,000 bytes of payload with the default;
  - the CPU time is mostly Python (the zlib checksum is native but brief);
  - every block is 32 KiB + a header: above pymalloc's 512-byte limit, below glibc's
    128 KiB mmap threshold, so these are ordinary malloc blocks.

Usage: python leak.py [N]
"""

import sys
import zlib

CHUNK = 32 * 1024
DEFAULT_N = 8_000
# Payload bytes held by LEAKED at the end with the default N (headers and list not counted).
EXPECTED_PEAK_BYTES = DEFAULT_N * CHUNK

LEAKED = []


def handle(i):
    payload = bytes([i & 0xFF]) * CHUNK  # churn: freed at the end of this call
    checksum = zlib.crc32(payload)
    for j in range(0, 1000):
        checksum = (checksum * 31 + j) & 0xFFFFFFFF  # @python
    LEAKED.append(bytes([(i + 1) & 0xFF]) * CHUNK)  # @leak @peak
    return checksum


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_N
    total = 0
    for i in range(n):
        total ^= handle(i)
    print(f"leak n={n} checksum={total} leaked={len(LEAKED)} x {CHUNK} B")


if __name__ == "__main__":
    main()
