"""sklearn_fit: scikit-learn regression: a linear least-squares fit and a small MLP.

Stresses: a typical classical-ML job: data generation in numpy, a LAPACK least-squares fit
(`LinearRegression`), and many small BLAS calls driven by Python code (`MLPRegressor` with
two hidden layers of 50, trained with Adam for a few epochs of mini-batches of 200 rows).

Known truth (default size n_samples = 20,000, n_features = 100):
  - the data (`X`: n_samples x n_features float64, 16 MB with the default) is allocated on
    the `make_regression` line and kept for the whole run;
  - `LinearRegression().fit` (the `@native` line) is mostly native time (LAPACK `gelsd`
    via scipy, on a centred copy of X);
  - `MLPRegressor.fit` mixes Python (scikit-learn's training loop, one iteration per
    mini-batch) and native time (BLAS on 200 x 100 / 200 x 50 blocks); its split depends on
    the machine, so it is not marked;
  - peak heap is not known exactly by construction (it depends on scikit-learn's internal
    copies); it is at least 2 x the size of X (X and LinearRegression's centred copy);
  - with n_samples = 0 the script imports scikit-learn and fits nothing (the baseline);
  - without scikit-learn the script prints "skipped: sklearn not installed" and exits 0.

Usage: python sklearn_fit.py [n_samples] [n_features]
"""

import sys
import warnings

try:
    from sklearn.datasets import make_regression
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LinearRegression
    from sklearn.neural_network import MLPRegressor
except ImportError:
    print("skipped: sklearn not installed")
    sys.exit(0)


def main():
    n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    n_features = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    if n_samples == 0:
        print("sklearn_fit n_samples=0 (imports only)")
        return
    X, y = make_regression(n_samples=n_samples, n_features=n_features, noise=1.0,
                           random_state=0)
    lin = LinearRegression().fit(X, y)  # @native
    warnings.simplefilter("ignore", ConvergenceWarning)
    mlp = MLPRegressor(hidden_layer_sizes=(50, 50), max_iter=8, random_state=0)
    mlp.fit(X, y)
    print(f"sklearn_fit n={n_samples} f={n_features} linear R2={lin.score(X, y):.4f} "
          f"mlp R2={mlp.score(X, y):.4f}")


if __name__ == "__main__":
    main()
