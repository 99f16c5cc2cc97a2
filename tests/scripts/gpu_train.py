"""A small CUDA training loop whose GPU figures it measures itself, for scripts/gpu_check.sh on a
machine with an NVIDIA GPU and PyTorch. Each marked line's truth is written to TRUTH_JSON:
the CUDA caching allocator's reserve before and after it (`torch.cuda.memory_reserved`), the
bytes it copies (known by construction), and the wall time of the lines that wait for the GPU
(`perf_counter` around them). The GPU is kept busy by `torch.cuda._sleep`, a kernel that spins
for a number of cycles, so that `.item()` has something to wait for.

argv: TRUTH_JSON [STEPS]
"""
import json
import sys
import time

import torch

out_path = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
MiB = 1 << 20
dev = torch.device("cuda")
truth = {"lines": {}, "steps": steps}


def note(name, **figures):
    line = truth["lines"].setdefault(name, {})
    for key, value in figures.items():
        line[key] = line.get(key, 0) + value


torch.zeros(1, device=dev)  # the CUDA context and the allocator's first segment
torch.cuda.synchronize()
truth["reserved_before"] = torch.cuda.memory_reserved()

r = torch.cuda.memory_reserved()
weights = torch.empty(64 * MiB, dtype=torch.float32, device=dev)  # @weights
note("weights", reserved=torch.cuda.memory_reserved() - r)
host = torch.ones(16 * MiB, dtype=torch.float32)  # 64 MiB, pageable
pinned = torch.ones(8 * MiB, dtype=torch.float32).pin_memory()  # @pinned
note("pinned", pinned=32 * MiB)

# Calibrate the sleeping kernel to about 0.2 s: it counts clock cycles, so after a first launch
# (its module loads lazily) and once the device's clock has risen from idle (a first timed
# sleep), the second measure holds.
torch.cuda._sleep(1_000_000)
torch.cuda.synchronize()
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
cycles = 50_000_000
for _ in range(2):
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    cycles = int(cycles * 200.0 / max(start.elapsed_time(end), 1e-3))
truth["sleep_cycles"] = cycles

for step in range(steps):
    r = torch.cuda.memory_reserved()
    x = host.to(dev)  # @h2d
    note("h2d", reserved=torch.cuda.memory_reserved() - r, h2d=64 * MiB)
    r = torch.cuda.memory_reserved()
    y = pinned.to(dev, non_blocking=True)  # @h2d_pinned
    note("h2d_pinned", reserved=torch.cuda.memory_reserved() - r, h2d=32 * MiB)
    r = torch.cuda.memory_reserved()
    z = (x[: 8 * MiB] * y).sum()  # @compute
    note("compute", reserved=torch.cuda.memory_reserved() - r)
    torch.cuda._sleep(cycles)  # @sleep
    t = time.perf_counter()
    loss = z.item()  # @item
    note("item", wait_s=time.perf_counter() - t, d2h=4)
    r = torch.cuda.memory_reserved()
    back = x[: 4 * MiB].cpu()  # @d2h
    note("d2h", reserved=torch.cuda.memory_reserved() - r, d2h=16 * MiB)
    t = time.perf_counter()
    torch.cuda._sleep(cycles // 2)
    torch.cuda.synchronize()  # @sync
    note("sync", wait_s=time.perf_counter() - t)
    del x, y, z, back

truth["max_reserved"] = torch.cuda.max_memory_reserved()
truth["reserved_end"] = torch.cuda.memory_reserved()
truth["device"] = torch.cuda.get_device_name(0)
with open(out_path, "w") as f:
    json.dump(truth, f, indent=1)
print("gpu_train done", steps, "steps")
