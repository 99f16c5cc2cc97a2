"""Fitting scikit-learn models: a least-squares linear model and a small neural network.

Run:
    mlprof run -- python examples/sklearn_fit.py

What the report should show:
  - the `make_regression` line holding the data at the peak (20,000 x 100 float64 = 15.3 MiB
    for X); the peak is reached inside `LinearRegression().fit`, whose line holds about
    twice as much again (scikit-learn's centred copy of X and LAPACK's work arrays);
  - the `LinearRegression().fit` line mostly native time (LAPACK/BLAS through scipy);
  - the `MLPRegressor(...).fit` line with most of the run's time, mostly native (BLAS, part
    of it OpenBLAS threads waiting for work: `blas_thread_server`, `exec_blas`) with a small
    Python share (scikit-learn's training loop), BLAS helper threads joined to it;
  - the `from sklearn...` import lines with about a second of Python time and ~60 MiB still
    held at the peak (scikit-learn and scipy modules).
"""
import warnings

from sklearn.datasets import make_regression
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LinearRegression
from sklearn.neural_network import MLPRegressor

X, y = make_regression(n_samples=20_000, n_features=100, noise=1.0, random_state=0)

linear = LinearRegression().fit(X, y)

warnings.simplefilter("ignore", ConvergenceWarning)
mlp = MLPRegressor(hidden_layer_sizes=(50, 50), max_iter=5, random_state=0).fit(X, y)

print(f"linear R2 {linear.score(X, y):.4f}, MLP R2 {mlp.score(X, y):.4f}")
