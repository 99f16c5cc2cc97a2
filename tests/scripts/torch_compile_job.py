"""torch.compile of a small MLP on CPU, when torch is importable (else it says it skipped):
the first call (`@compile`) traces the model and has inductor generate C++ kernels, which it
builds with g++ in child processes (g++, cc1plus, as, ld: dozens of them) and a pool of Python
compile workers. Known truth: that compile step, the Python work and the compiler children's
CPU, is the cost of the `@compile` line; the later calls (`@run`) are cheap."""
import os
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skipped: torch not installed")
    sys.exit(0)

# A fresh cache: a warm one would skip the compile this test is about.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchinductor_test_")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 16))
x = torch.randn(1024, 256)
compiled = torch.compile(model)  # @wrap
with torch.no_grad():
    y = compiled(x)  # @compile
    for _ in range(50):
        y = compiled(x)  # @run
print("%.3f" % float(y.sum()), flush=True)
