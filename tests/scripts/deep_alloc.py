"""Allocation churn 60 Python frames deep (as in scikit-learn or a torch module tree): Python
objects and native buffers. argv[1]: iterations (default 20000)."""
import sys


def churn(n):
    kept = []
    for i in range(n):
        kept.append(bytearray(4096))  # native (malloc)
        kept.append([i] * 64)  # Python objects (pymalloc)
        if len(kept) > 200:
            kept.clear()
    return len(kept)


def deep(level, n):
    if level == 0:
        return churn(n)
    return deep(level - 1, n)


print(deep(60, int(sys.argv[1]) if len(sys.argv) > 1 else 20000))
