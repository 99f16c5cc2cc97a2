"""scikit-learn's OpenMP-parallel estimators as users call them, when scikit-learn is
importable (else it says it skipped). Known truth: the `@fit-gbm` and `@fit-kmeans` lines
cause all the CPU of scikit-learn's OpenMP team (its own bundled libgomp: a histogram
gradient-boosting fit, then k-means), main thread and pool threads alike; the `@data` line
allocates and keeps X (200,000 x 20 float64 = 32 MB)."""
import sys
import time

try:
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.ensemble import HistGradientBoostingRegressor
except ImportError:
    print("skipped: scikit-learn not installed")
    sys.exit(0)

rng = np.random.default_rng(0)
X = rng.standard_normal((200_000, 20))  # @data
y = X[:, 0] * 2.0 + np.sin(X[:, 1])
start = time.perf_counter()
while time.perf_counter() - start < 2.0:
    HistGradientBoostingRegressor(max_iter=30, early_stopping=False).fit(X, y)  # @fit-gbm
    KMeans(n_clusters=8, n_init=1, max_iter=30, random_state=0).fit(X)  # @fit-kmeans
print("fitted", flush=True)
