"""Tensors per region (mlprof.mark) on a (fake: tests/fake-torch) CUDA device, known by
construction. Before any region, @model allocates 8 MiB, held until "step" frees it.
- "load": @weights 16 MiB, kept; @scratch 4 MiB, freed inside. It starts with 8 MiB held; its
  highest is 8 + 16 + 4 = 28 MiB, 20 MiB above its start: @weights 16 MiB and @scratch 4 MiB.
- "step": starts with 24 MiB. @act 32 MiB, then @kept 2 MiB: the highest, 58 MiB, 34 MiB above
  its start (@act 32, @kept 2); then @act is freed, and so is @model (made before the region).
- "idle": starts with 18 MiB and allocates nothing: 0 above its start, no line.
Each region's allocations are 10 ms from its edges: PyTorch's stamps are mapped to the run's
clock to within about a millisecond (docs/design/gpu-tensors.md).
"""
import time

import mlprof
import torch

EDGE = 0.01

MIB = 1 << 20
model = torch.empty(8 * MIB)  # @model
with mlprof.mark("load"):
    time.sleep(EDGE)
    weights = torch.empty(16 * MIB)  # @weights
    scratch = torch.empty(4 * MIB)  # @scratch
    del scratch
    time.sleep(EDGE)
with mlprof.mark("step"):
    time.sleep(EDGE)
    act = torch.empty(32 * MIB)  # @act
    kept = torch.empty(2 * MIB)  # @kept
    del act
    del model
    time.sleep(EDGE)
with mlprof.mark("idle"):
    total = sum(range(1000))
print("regions done", flush=True)
