"""CUDA work of a thread without Python while the line that started it waits, as PyTorch's
autograd engine runs a CUDA backward on a device thread of its own; known by construction.
- @engine: the framework's engine thread (tests/fake-cuda/fake_framework.c, `fw_engine`)
  computes 0.15 s, reserves 48 MiB, copies 1 MiB to the device, launches 25 kernels and
  computes 0.15 s more; the line computes a little itself first, then waits for it.
- @tensors (tests/fake-torch, `_engine_empty`): 16 MiB of tensors allocated with no Python
  frame (as the engine thread's gradients are) by a thread that computes 0.15 s, allocates and
  computes 0.15 s more while the line waits for it; kept to the end, so they are the GPU's
  peak.
argv: FRAMEWORK_LIBRARY
"""
import ctypes
import sys

import torch

fw = ctypes.CDLL(sys.argv[1])
fw.fw_engine.restype = ctypes.c_uint64
fw.fw_engine.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_double]
MIB = 1 << 20
N = 10_000_000

warm = sum(range(N))  # @before
block = fw.fw_engine(48 * MIB + 0 * sum(range(N)), 25, 0.3)  # @engine
assert block, "the engine thread's calls failed"
grads = torch._engine_empty(16 * MIB + 0 * sum(range(N)), 0.3)  # @tensors
after = sum(range(N))  # @after
print("engine done", flush=True)
