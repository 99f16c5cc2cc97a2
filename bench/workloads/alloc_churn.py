"""alloc_churn: allocation-heavy pure Python, the worst case for an allocation interposer.

Stresses: the malloc-family hot path. Each iteration creates and drops a small dict, a small
list, a tuple, a few short strings and a bytes object, so nearly every line allocates and
frees. Alongside, a few lists grow for the whole run and are kept until exit.

Known truth (by construction; default size N = 1_600_000 iterations):
  - churn: about 10 Python object allocations per iteration (dict, list and its item array,
    tuple, 3 strings, bytes, a few ints beyond the small-int cache), all freed within the
    same iteration: ~16 million allocations in total with a flat live heap. All are <= 512 B,
    so CPython serves them from pymalloc pools; at the libc malloc level only pymalloc's
    arenas (1 MiB from 3.10, 256 KiB before) show, unless the profiler wraps PyMem/PyObject
    allocators;
  - growth: `kept_ints` ends with N // 4 ints (beyond the small-int cache, so each is an
    object) and `kept_strs` with N // 8 strings of 64 characters; tracemalloc measures
    40.3 MB live at the end of `run` with the default N, growing linearly through the run;
  - peak heap is at (or just before) the end of the main loop, in `run`; the line holding
    the most then is the `kept_strs.append` line (`@peak`: N // 8 strings of 113 bytes, in
    128-byte pymalloc blocks, 25.6 MB with the default, plus the list), ahead of the
    `kept_ints.append` line (N // 4 ints of 28 bytes in 32-byte blocks plus the list,
    about 16 MB);
  - nothing leaks: the retained lists are reachable and freed at interpreter exit.

Usage: python alloc_churn.py [N]
"""

import sys


def run(n):
    kept_ints = []
    kept_strs = []
    checksum = 0
    for i in range(n):
        d = {"a": i, "b": [i, i + 1, i + 2], "c": str(i)}  # dict + list + str: churn
        t = (d["a"], d["c"] * 3, f"key-{i}")  # tuple + strings: churn
        b = bytes(48)  # bytes object: churn
        checksum += len(t[1]) + len(d["b"]) + len(b)
        del d, t, b
        if i % 4 == 0:
            kept_ints.append(i * 1000)  # kept: grows to n // 4 entries
        if i % 8 == 0:
            kept_strs.append(("%064d" % i))  # @peak
    return checksum, kept_ints, kept_strs


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_600_000
    checksum, kept_ints, kept_strs = run(n)
    print(f"alloc_churn n={n} checksum={checksum} kept={len(kept_ints)}+{len(kept_strs)}")


if __name__ == "__main__":
    main()
