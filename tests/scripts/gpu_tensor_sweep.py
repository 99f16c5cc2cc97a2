"""PyTorch tensors (fake: tests/fake-torch) whose sizes follow argv[1] = N: @linear holds N MiB,
@square N² MiB and @constant 4 MiB, all live together at the peak. A sweep fits exponents 1, 2
and 0; a diff of N=2 against N=4 moves @linear by 2 MiB and @square by 12 MiB, not @constant."""
import sys

import torch

MIB = 1 << 20
n = int(sys.argv[1])
a = torch.empty(n * MIB)  # @linear
b = torch.empty(n * n * MIB)  # @square
c = torch.empty(4 * MIB)  # @constant
print(torch.cuda.max_memory_allocated() // MIB, "MiB")
