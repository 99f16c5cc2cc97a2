"""A pytest module whose tests hold known tensors on a (fake: tests/fake-torch) CUDA device.
The module's fixture allocates 8 MiB (@fixture) outside any test. test_big allocates 24 MiB
(@big) above it and frees it; test_small keeps 1 MiB (@small) until the module ends.
Each test's allocations are 10 ms from its edges (the trace's clock is mapped to within about
a millisecond).
"""
import time

import pytest
import torch

MIB = 1 << 20
kept = []


@pytest.fixture(scope="module")
def model():
    return torch.empty(8 * MIB)  # @fixture


def test_big(model):
    time.sleep(0.01)
    block = torch.empty(24 * MIB)  # @big
    del block
    time.sleep(0.01)


def test_small(model):
    time.sleep(0.01)
    kept.append(torch.empty(MIB))  # @small
    time.sleep(0.01)
