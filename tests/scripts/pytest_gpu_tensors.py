"""A pytest module whose tests hold known tensors on a (fake: tests/fake-torch) CUDA device.
The module's fixture allocates 8 MiB (@fixture) outside any test. test_big allocates 24 MiB
(@big) above it and frees it; test_small keeps 1 MiB (@small) until the module ends.
"""
import pytest
import torch

MIB = 1 << 20
kept = []


@pytest.fixture(scope="module")
def model():
    return torch.empty(8 * MIB)  # @fixture


def test_big(model):
    block = torch.empty(24 * MIB)  # @big
    del block


def test_small(model):
    kept.append(torch.empty(MIB))  # @small
