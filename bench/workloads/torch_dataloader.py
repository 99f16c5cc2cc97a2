"""torch_dataloader: a PyTorch training loop fed by DataLoader worker processes.

Stresses: the profiler's own cost on a multi-process torch job. Every worker process has
imported torch (hundreds of MiB of mapped libraries), which makes reading its page map
(`/proc/PID/smaps_rollup`) cost milliseconds; a profiler that reads it for every process at a
fixed rate spends a large share of the machine there. WORKERS fork workers (`--start spawn`
for spawned ones) build each batch in Python (`__getitem__` computes each sample from its
index with a Python loop), and the main process trains a small MLP on them.

Known truth (default size N = 3 epochs of 64 batches of 64 samples):
  - the workers' time is Python on the `@python` line of `__getitem__` (the loop), and the
    main process waits for batches on the DataLoader line and trains on the others;
  - the peak is not known by construction (torch's own allocations), so no
    EXPECTED_PEAK_BYTES;
  - with N = 0 the script imports torch, builds the model and a DataLoader, and iterates it
    once over no batches (the workers still start);
  - without torch the script prints "skipped: torch not installed" and exits 0 (torch is
    not in target/bench-venv: see bench/README.md for target/torch-venv).

Usage: python torch_dataloader.py [N] [--start fork|spawn]
"""

import sys

try:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset
except ImportError:
    print("skipped: torch not installed")
    sys.exit(0)

WORKERS = 4
BATCHES = 64
BATCH = 64
FEATURES = 64


class Computed(Dataset):
    """Samples computed from their index in Python: the workers' CPU is Python time."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        row = [0.0] * FEATURES
        for k in range(FEATURES * 40):
            row[k % FEATURES] += ((i * 31 + k) % 97) / 3880.0  # @python
        return torch.tensor(row), torch.tensor([sum(row) / FEATURES])


def main(argv):
    start = "fork"
    if "--start" in argv:
        k = argv.index("--start")
        start = argv[k + 1]
        del argv[k : k + 2]
    epochs = int(argv[0]) if argv else 3
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Computed(BATCHES * BATCH if epochs else 0)
    loader = DataLoader(
        data,
        batch_size=BATCH,
        num_workers=WORKERS,
        multiprocessing_context=start,
        persistent_workers=False,
    )
    total = 0.0
    for _ in range(max(epochs, 1)):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            total += float(loss)
    print("loss %.4f" % total)


if __name__ == "__main__":
    main(sys.argv[1:])
