"""torch_train: a PyTorch CPU training loop: MLP, Adam, MSE loss, DataLoader.

Stresses: a typical small deep-learning job on the CPU. A `torch.utils.data.DataLoader`
(batches of 256 rows, shuffled with a seeded generator, no worker processes) over a
`TensorDataset` of synthetic data feeds an MLP (Linear 256->512, ReLU, Linear 512->512,
ReLU, Linear 512->16) trained with Adam on an MSE loss: per batch, Python-driven dispatch
of many small ATen ops (DataLoader indexing and collation, module calls, autograd, the
optimizer) around GEMMs (MKL / oneDNN) on one intra-op thread (see THREADS).

Known truth (default size N = 8 epochs of 16,384 samples = 64 batches per epoch):
  - `loss.backward()` (the `@native` line) is (nearly) all native time: the autograd engine
    runs the backward pass of a CPU graph in C++ on the calling thread, below only thin
    Python wrappers (torch/_tensor.py, torch/autograd/) that call into it;
  - the forward pass, the DataLoader line (256 `TensorDataset.__getitem__` calls and a
    `torch.stack` per batch) and `optimizer.step()` mix Python and native time in
    machine-dependent shares, so they are not marked;
  - the data (`X`: 16,384 x 256 float32 = 16 MiB, `Y`: 16,384 x 16 float32 = 1 MiB) and the
    model's 402,448 float32 parameters (1.5 MiB) are allocated before training and kept;
    the first training step adds the gradients and Adam's two moment buffers (3 x 1.5 MiB,
    kept from then on), and every step allocates and frees its activations (a few MiB per
    batch of 256). The peak is not known exactly by construction (ATen's temporaries and
    autograd's saved tensors are not counted here), so no EXPECTED_PEAK_BYTES;
  - with N = 0 the script imports torch, builds the data, the model, the optimizer and the
    DataLoader, and trains nothing (the baseline);
  - without torch the script prints "skipped: torch not installed" and exits 0 (torch is
    not in target/bench-venv: see bench/README.md for target/torch-venv).

Usage: python torch_train.py [N]
"""

import sys

try:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
except ImportError:
    print("skipped: torch not installed")
    sys.exit(0)

SAMPLES = 16_384
IN_FEATURES = 256
HIDDEN = 512
OUT_FEATURES = 16
BATCH = 256

# One intra-op thread (torch's default is one per core: 2 on the 2-core VM). Measured there,
# training for 4 epochs: 2 threads took 2.0-2.2 s while the other core was idle, but 4.7-22 s
# while a compile or test job ran beside it (torch's libgomp threads spin-wait at each
# parallel region's barrier, so one descheduled thread stalls the other: user time rose
# with the wall time); 1 thread took 2.4-2.6 s in both cases. A profiler's own process
# competes for the cores too, so with 2 threads the overhead ratios would mostly measure
# that straggler effect and the machine's other load; with 1 thread they measure the
# profiler. It also keeps the work per thread the same on any machine. numpy_matmul.py and
# threads.py cover multi-threaded BLAS.
THREADS = 1
# num_workers=0: batches are built in the training process itself. Worker processes start
# afresh every epoch (fork, then the workers' own start-up), so the timing would depend on
# that start-up and on how two cores are shared among three processes; measured on the
# 2-core VM (1 thread, 4 epochs) 2 workers trained in 2.85-2.98 s against 2.43-2.61 s
# without. Following forked children is what mp_pool.py covers.
WORKERS = 0


def make_data(samples):
    """Synthetic regression data from a fixed random "teacher" network (seeded)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, IN_FEATURES, generator=g)
    w1 = torch.randn(IN_FEATURES, 64, generator=g) / IN_FEATURES**0.5
    w2 = torch.randn(64, OUT_FEATURES, generator=g) / 8.0
    y = torch.tanh(x @ w1) @ w2 + 0.01 * torch.randn(samples, OUT_FEATURES, generator=g)
    return x, y


def train(epochs):
    torch.manual_seed(0)
    X, Y = make_data(SAMPLES)  # kept: 16 MiB + 1 MiB
    loader = DataLoader(TensorDataset(X, Y), batch_size=BATCH, shuffle=True,
                        num_workers=WORKERS, generator=torch.Generator().manual_seed(1))
    model = nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, OUT_FEATURES),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    losses = []
    for _ in range(epochs):
        total = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()  # @native
            optimizer.step()
            total += loss.item()
        losses.append(total / len(loader))
    return losses


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    torch.set_num_threads(THREADS)
    losses = train(epochs)
    first = f"{losses[0]:.5f}" if losses else "-"
    last = f"{losses[-1]:.5f}" if losses else "-"
    print(f"torch_train epochs={epochs} threads={torch.get_num_threads()} workers={WORKERS} "
          f"loss first={first} last={last}")


if __name__ == "__main__":
    main()
