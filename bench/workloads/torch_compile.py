"""torch_compile: a small MLP compiled with torch.compile (Inductor, CPU), then trained.

Stresses: the profiler's own cost on a job whose compiler runs in processes of its own.
Inductor compiles the generated C++ kernels in a pool of worker processes (one per CPU, each
having imported torch, so reading its page map costs milliseconds), and the compile itself
is seconds of Python in the main process.

Known truth (default size N = 40 training steps after the compile):
  - the compile (graph capture, Inductor's code generation, the compiler processes' work)
    happens at the first call of the compiled step (the line so commented);
  - the steps after it run the compiled kernels, on the lines of the function compiled (its
    code runs as compiled, under its own lines): the backward's kernels are native time on
    the `@native` line;
  - the peak is not known by construction (torch's and the compiler's own allocations), so
    no EXPECTED_PEAK_BYTES;
  - with N = 0 the script imports torch and builds the model without compiling it;
  - without torch (or without a C compiler, which Inductor needs) the script prints
    "skipped: ..." and exits 0.

Usage: python torch_compile.py [N]
"""

import os
import shutil
import sys
import tempfile

# Every run compiles from scratch, as a program's first run does: Inductor's caches in a
# directory of this run's own, removed at the end, named as Inductor names its own
# (`torchinductor_USER`), where profilers know its generated wrappers for library code.
CACHE = tempfile.mkdtemp(prefix="torchinductor_bench_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = CACHE
os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"

try:
    import torch
    from torch import nn
except ImportError:
    print("skipped: torch not installed")
    shutil.rmtree(CACHE, ignore_errors=True)
    sys.exit(0)
if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("g++")):
    print("skipped: no C compiler for Inductor")
    shutil.rmtree(CACHE, ignore_errors=True)
    sys.exit(0)

FEATURES = 256
BATCH = 512


def main(argv):
    steps = int(argv[0]) if argv else 40
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(FEATURES, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, FEATURES)
    y = torch.randn(BATCH, 1)
    if steps == 0:
        print("not compiled")
        return

    def step(x, y):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # @native
        return loss.detach()

    compiled = torch.compile(step)
    total = float(compiled(x, y))  # the compile happens here
    opt.step()
    for _ in range(steps):
        opt.zero_grad()
        total += float(compiled(x, y))
        opt.step()
    print("loss %.4f" % total)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    finally:
        shutil.rmtree(CACHE, ignore_errors=True)
