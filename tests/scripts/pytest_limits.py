"""Tests with memory limits, run under pytest --mlprof by tests/e2e/pytest_plugin.rs and
scripts/wheel_check.py: which fail, and the lines they name, are known by construction."""
import multiprocessing as mp
import numpy as np
import pytest

kept = []

@pytest.mark.limit_memory("50 MiB")
def test_big():
    a = np.ones(100 * 2**20 // 8)  # @big
    assert a.sum() > 0

@pytest.mark.limit_memory("50 MiB")
def test_small():
    a = np.ones(10 * 2**20 // 8)  # @small
    assert a.sum() > 0

def test_unmarked():
    a = np.ones(100 * 2**20 // 8)
    assert a.sum() > 0

@pytest.mark.limit_leaks("1 MiB")
def test_leaks():
    kept.append(np.ones(4 * 2**20 // 8))  # @leak

@pytest.mark.limit_leaks("1 MiB")
def test_no_leak():
    x = np.ones(4 * 2**20 // 8)
    del x

def child(n):
    a = np.ones(n // 8)  # @child
    return float(a.sum())

@pytest.mark.limit_memory("50 MiB")
def test_fork_big():
    p = mp.get_context("fork").Process(target=child, args=(100 * 2**20,))
    p.start()
    p.join()
    assert p.exitcode == 0
