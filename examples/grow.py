"""How memory grows with the data: `python examples/grow.py N`.

A feature matrix of N rows (8 KB each) and an N x N similarity matrix, both kept: the first
grows linearly with N, the second quadratically. `mlprof sweep` finds out which is which.
"""
import sys

import numpy as np


def build(n):
    features = np.random.default_rng(0).random((n, 1000))  # N x 1000 float64
    similarity = features @ features.T  # N x N float64
    return features, similarity


if __name__ == "__main__":
    n = int(sys.argv[1])
    features, similarity = build(n)
    print(f"N={n}: {features.nbytes + similarity.nbytes:,} bytes kept")
