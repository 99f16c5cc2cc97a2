"""A small training-like job: what `mlprof run` shows on real work.

- `python_features` is a pure-Python loop (Python time).
- `fit` multiplies matrices with numpy (native time in BLAS).
- `make_data` allocates ~240 MB that stays alive until the end (the heap peak).
"""
import numpy as np


def make_data(n_rows=10_000, n_cols=3_000):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n_rows, n_cols))  # 240 MB, kept


def python_features(n=2_000_000):
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total


def fit(x, steps=5):
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        grad = x.T @ (x @ w - 1.0) / len(x)
        w -= 0.1 * grad
    return w


if __name__ == "__main__":
    data = make_data()
    print("feature:", python_features())
    print("weights norm:", float(np.linalg.norm(fit(data))))
