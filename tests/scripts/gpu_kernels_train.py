"""A small CUDA training loop whose GPU time per line is measured by PyTorch's own profiler,
for scripts/gpu_check.sh on a machine with an NVIDIA GPU and PyTorch. Run twice with the same
steps: `profiler` mode wraps each marked line in `torch.profiler.record_function` inside a
`torch.profiler.profile` of every step and writes each line's CUDA time by torch's account
(the truth); `plain` mode runs the same steps bare (under mlprof, which then owns CUPTI) and
writes the loop's wall time (the overhead's measure). Two warm-up steps come first, outside
both (cuBLAS set-up, lazy module loading). A line's truth is the device time of every kernel
launched while its `record_function` range was open, by any thread: a CUDA backward's kernels
are launched by the autograd engine's own device thread, outside the range's children.

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


def train_step(label):
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


for _ in range(2):
    train_step(lambda name: contextlib.nullcontext())
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
        train_step(label)
    torch.cuda.synchronize()
loop_s = time.perf_counter() - start

LABELS = ("forward", "loss", "backward", "step", "zero")


def own_kernels_us(e):
    """Device time of the kernels a CPU op launched itself (not its children's)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        us = getattr(e, name, None)
        if us is not None:
            return us
    return 0


result = {"mode": mode, "steps": steps, "loop_s": loop_s, "lines": {}}
if mode == "profiler":
    cpu = torch.autograd.DeviceType.CPU
    events = [e for e in prof.events() if e.device_type == cpu]
    ranges = sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                    if e.name in LABELS)
    lines = dict.fromkeys(LABELS, 0.0)
    for e in events:
        if e.name in LABELS:
            continue
        t = e.time_range.start
        for start, end, name in ranges:
            if start <= t <= end:
                lines[name] += own_kernels_us(e) / 1e6
                break
    result["lines"] = lines
with open(out_path, "w") as f:
    json.dump(result, f, indent=1)
print("gpu_kernels_train done", mode, steps, "steps")
