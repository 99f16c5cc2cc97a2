"""Two GPU memory mistakes on a (fake: tests/fake-torch) CUDA device, and their fixed forms
(argument `fixed`). Each of 6 steps allocates 256 MiB at @forward; the step's output is kept in
a list (as `losses.append(loss)` keeps each step's autograd graph), so @forward's tensors rise
to 1.5 GiB at the peak; fixed, only the last is kept. Before the loop, @scratch takes 1 GiB and
frees it: no later tensor has that size, so the allocator keeps 1 GiB reserved and free (cache
slack) through the peak, of 2.5 GiB reserved; fixed, the scratch is 256 MiB, the size the loop
reuses."""
import sys

import torch

MIB = 1 << 20
fixed = sys.argv[1:] == ["fixed"]
scratch = torch.empty((256 if fixed else 1024) * MIB)  # @scratch
del scratch
kept = []
for step in range(6):
    out = torch.empty(256 * MIB)  # @forward
    if fixed:
        kept = [out]
    else:
        kept.append(out)
    del out
print(len(kept), "kept")
