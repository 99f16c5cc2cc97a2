"""Tests whose verdicts follow from how the interpreter was started: with and without
`--mlprof` they must be the same (tests/e2e/pytest_same.rs)."""
import os
import sys
import warnings


def test_optimize_is_on_only_with_O():
    # Not an assert statement, nor __debug__: pytest compiles test modules itself, keeping both.
    if not sys.flags.optimize:
        raise AssertionError("no -O")


def test_a_deprecation_is_an_error_only_with_W():
    warnings.warn("an old API", DeprecationWarning)


def test_dev_mode_is_on_only_with_X_dev():
    assert sys.flags.dev_mode


def test_the_starting_directory_is_importable_only_with_m():
    import helper_in_cwd  # noqa: F401


def test_the_conftest_moved_the_tests_into_sub():
    assert os.path.basename(os.getcwd()) == "sub"
