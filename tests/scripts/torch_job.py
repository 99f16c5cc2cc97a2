"""A small PyTorch CPU training job as users write one (issue 15's case): an MLP trained with
Adam over a DataLoader with 2 worker processes for 3 epochs, torch's default intra-op threads,
and a list that keeps 32 MB per epoch. The job times its own phases on the main thread
(`time.perf_counter` around each, printed last as `phases forward=S backward=S ...`): the
truth the profile is held to. Measured unprofiled on the 2-core VM, forward and backward take
about 37% of the wall time, the step 21%, waiting for batches 7%, `import torch` 20%. The keep
line grows by 32 MB an epoch and is never freed. For forward and backward it also prints
`runnable forward=S backward=S`: the seconds of those phases the kernel says the main thread
was runnable but not running (its run-queue delay, /proc/thread-self/schedstat; 0 where the
kernel does not keep it), time no profiler line holds, large on a busy machine."""
import sys
import time


def runnable():
    """Seconds this thread has spent runnable but not running, as the kernel counts them."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0

try:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
except ImportError:
    print("skipped: torch not installed")
    sys.exit(0)

HIDDEN = 1024


def main():
    torch.manual_seed(0)
    x = torch.randn(40_000, 256)
    y = torch.randn(40_000, 16)
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(256, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                          nn.ReLU(), nn.Linear(HIDDEN, 16))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    kept = []
    spent = dict.fromkeys(["batches", "forward", "backward", "step"], 0.0)
    queued = dict.fromkeys(["forward", "backward"], 0.0)
    clock = time.perf_counter
    for epoch in range(3):
        t = clock()
        for xb, yb in loader:  # @batches
            spent["batches"] += clock() - t
            optimizer.zero_grad()
            q, t = runnable(), clock()
            out = model(xb)  # @forward
            spent["forward"] += clock() - t
            queued["forward"] += runnable() - q
            loss = loss_fn(out, yb)
            q, t = runnable(), clock()
            loss.backward()  # @backward
            spent["backward"] += clock() - t
            queued["backward"] += runnable() - q
            t = clock()
            optimizer.step()  # @step
            spent["step"] += clock() - t
            t = clock()
        kept.append(bytearray(32 << 20))  # @keep
        print("epoch", epoch, "loss", float(loss))
    print("phases", " ".join(f"{k}={v:.3f}" for k, v in spent.items()), flush=True)
    print("runnable", " ".join(f"{k}={v:.3f}" for k, v in queued.items()), flush=True)


if __name__ == "__main__":
    main()
