"""A small CUDA training loop whose GPU time per line is measured by PyTorch's own profiler,
for scripts/gpu_check.sh on a machine with an NVIDIA GPU and PyTorch. Run twice with the same
steps: `profiler` mode wraps each marked line in `torch.profiler.record_function` inside a
`torch.profiler.profile` of every step and writes each line's CUDA time by torch's account
(the truth); `plain` mode runs the same steps bare (under mlprof, which then owns CUPTI) and
writes the loop's wall time (the overhead's measure).

argv: MODE(plain|profiler) OUT_JSON [STEPS]
"""
import contextlib
import json
import sys
import time

import torch

mode, out_path = sys.argv[1], sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
dev = torch.device("cuda")
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 4096, device=dev)
target = torch.randn(512, 1024, device=dev)
torch.cuda.synchronize()

if mode == "profiler":
    from torch.profiler import ProfilerActivity, profile, record_function

    label = record_function
    session = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
else:
    label = lambda name: contextlib.nullcontext()  # noqa: E731
    session = contextlib.nullcontext()

start = time.perf_counter()
with session as prof:
    for _ in range(steps):
        with label("forward"):
            out = model(x)  # @forward
        with label("loss"):
            loss = torch.nn.functional.mse_loss(out, target)  # @loss
        with label("backward"):
            loss.backward()  # @backward
        with label("step"):
            opt.step()  # @step
        with label("zero"):
            opt.zero_grad(set_to_none=False)  # @zero
    torch.cuda.synchronize()
loop_s = time.perf_counter() - start

result = {"mode": mode, "steps": steps, "loop_s": loop_s, "lines": {}}
if mode == "profiler":
    for e in prof.key_averages():
        if e.key in ("forward", "loss", "backward", "step", "zero"):
            us = getattr(e, "device_time_total", None)
            if us is None:
                us = e.cuda_time_total
            result["lines"][e.key] = us / 1e6
with open(out_path, "w") as f:
    json.dump(result, f, indent=1)
print("gpu_kernels_train done", mode, steps, "steps")
