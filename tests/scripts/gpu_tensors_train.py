"""A CUDA training loop with a known peak of tensors, for scripts/gpu_check.sh on a machine with
an NVIDIA GPU and PyTorch. After `steps` training steps (a model, its optimiser state, a batch),
an evaluation phase allocates three buffers at @buf_a, @buf_b and @buf_c (512, 256 and 128 MiB)
while everything else is still held: the process's allocated GPU memory peaks there, and the
script checks it (memory_allocated() == max_memory_allocated()). At that moment it takes
PyTorch's own snapshot (`torch.cuda.memory_snapshot()`, blocks with their Python stacks) and
writes the bytes the live blocks' tensors asked for by the innermost frame in this file: the
truth that mlprof's tensors at the peak per line are held against. Blocks with no Python frame
at all (allocated by a thread without Python: the autograd engine's device thread in backward,
its cuBLAS workspace) are written apart (`no_python`), and so are blocks whose frames are all
outside this file (`outside`): mlprof charges the first to the line the Python thread was on
then. Without mlprof the script switches on PyTorch's stack recording itself
(`enabled="state"`); under mlprof the start-up hook's trace provides the stacks, and calling it
again would replace that trace. With `bare`, nothing is recorded and no truth is taken: the
loop's wall time only, the overhead's measure. Two warm-up steps come before the timed loop.

argv: OUT_JSON [STEPS] [bare]
"""
import json
import os
import sys
import time

import torch

out_path = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
bare = "bare" in sys.argv[3:]
if "MLPROF_DIR" not in os.environ and not bare:
    torch.cuda.memory._record_memory_history(enabled="state", stacks="python")
dev = torch.device("cuda")
torch.manual_seed(0)
model = torch.nn.Sequential(  # @model
    torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(256, 2048, device=dev)  # @batch
target = torch.randn(256, 1024, device=dev)  # @target



def train_step():
    out = model(x)  # @forward
    loss = torch.nn.functional.mse_loss(out, target)  # @loss
    loss.backward()  # @backward
    opt.step()  # @step
    opt.zero_grad(set_to_none=True)  # @zero


for _ in range(2):
    train_step()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(steps):
    train_step()
torch.cuda.synchronize()
loop_s = time.perf_counter() - start
if bare:
    with open(out_path, "w") as f:
        json.dump({"steps": steps, "loop_s": loop_s}, f, indent=1)
    sys.exit(0)

MIB = 1 << 20
buf_a = torch.empty(512 * MIB, dtype=torch.uint8, device=dev)  # @buf_a
buf_b = torch.empty(256 * MIB, dtype=torch.uint8, device=dev)  # @buf_b
buf_c = torch.empty(128 * MIB, dtype=torch.uint8, device=dev)  # @buf_c
allocated, most = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
requested = torch.cuda.memory_stats()["requested_bytes.all.peak"]
snapshot = torch.cuda.memory_snapshot()
me = os.path.abspath(__file__)
by_line, no_python, outside = {}, 0, 0
for segment in snapshot:
    for block in segment["blocks"]:
        if block["state"] != "active_allocated":
            continue
        size = block.get("requested_size", block["size"])
        frames = block.get("frames", [])
        line = next((f["line"] for f in frames if f["filename"] == me), None)
        if not frames:
            no_python += size
        elif line is None:
            outside += size
        else:
            by_line[line] = by_line.get(line, 0) + size
with open(out_path, "w") as f:
    json.dump({"steps": steps, "loop_s": loop_s, "allocated": allocated, "max_allocated": most,
               "max_requested": requested, "peak_here": allocated == most, "lines": by_line,
               "no_python": no_python, "outside": outside}, f, indent=1)
print("gpu_tensors_train done", steps, "steps; at the peak:", allocated == most)
