"""Tensors on a (fake: tests/fake-torch) CUDA device with known sizes per line. @tmp takes
6 MiB and frees it (the allocator keeps it cached: slack). @weights holds 8 MiB all along.
Each of 4 steps allocates 16 MiB at @act, freed at the step's end (the cached block is reused),
and keeps 2 MiB at @kept. The peak is the 4th @kept allocation: 8 + 16 + 4 x 2 = 32 MiB, with
38 MiB reserved (6 MiB slack). @after (4 MiB) comes after it and holds nothing at the peak.
@oom asks for far more than the device has: the allocation fails, with @weights (8 MiB),
@kept (8 MiB) and @after (4 MiB) held. Prints sys.path, so that a run under mlprof shows the
path the program would have had without it. With argument `exit`, it ends with `os._exit(0)`:
no exit handler runs.
"""
import os
import sys

import torch

MIB = 1 << 20
tmp = torch.empty(6 * MIB)  # @tmp
del tmp
weights = torch.empty(8 * MIB)  # @weights
kept = []


def step():
    act = torch.empty(16 * MIB)  # @act
    kept.append(torch.empty(2 * MIB))  # @kept
    return act


for _ in range(4):
    step()
after = torch.empty(4 * MIB)  # @after
try:
    torch.empty(1 << 40)  # @oom
except torch.cuda.OutOfMemoryError:
    print("out of memory, caught")
print(torch.cuda.max_memory_allocated() // MIB, "MiB at most")
print(sys.path[1:], flush=True)
if sys.argv[1:] == ["exit"]:
    os._exit(0)
