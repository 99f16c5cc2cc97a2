"""Tensors on a (fake: tests/fake-torch) CUDA device with known sizes per line. @small holds
100 bytes all along (a block of 512, in a 2 MiB segment of its own). @tmp takes 6 MiB and
frees it (the allocator keeps it cached: slack). @weights holds 8 MiB all along.
Each of 4 steps allocates 16 MiB at @act, freed at the step's end (the cached block is reused),
and keeps 2 MiB at @kept. The peak is the 4th @kept allocation: 8 + 16 + 4 x 2 = 32 MiB and 100 bytes asked for (the
blocks: 32 MiB and 512 bytes), with 40 MiB reserved. @after (4 MiB) comes after it and holds nothing at the peak.
@oom asks for far more than the device has: the allocation fails, with @weights (8 MiB),
@kept (8 MiB), @after (4 MiB) and @small held. Prints sys.path, so that a run under mlprof shows the
path the program would have had without it. With argument `exit`, it ends with `os._exit(0)`:
no exit handler runs; with `probe`, it first asks where `torch` is without importing it, as
transformers and datasets do.
"""
import os
import sys

if "probe" in sys.argv[1:]:
    import importlib.util

    importlib.util.find_spec("torch")
import torch  # noqa: E402

MIB = 1 << 20
small = torch.empty(100)  # @small
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
if "exit" in sys.argv[1:]:
    os._exit(0)
