"""A small PyTorch CPU training job as users write one (issue 15's case): an MLP trained with
Adam over a DataLoader with 2 worker processes for 3 epochs, torch's default intra-op threads,
and a list that keeps 32 MB per epoch. Known truth: the forward and backward lines do most of
the work; the keep line grows by 32 MB an epoch and is never freed."""
import sys

try:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
except ImportError:
    print("skipped: torch not installed")
    sys.exit(0)


def main():
    torch.manual_seed(0)
    x = torch.randn(20_000, 256)
    y = torch.randn(20_000, 16)
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 16))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    kept = []
    for epoch in range(3):
        for xb, yb in loader:
            optimizer.zero_grad()
            out = model(xb)  # @forward
            loss = loss_fn(out, yb)
            loss.backward()  # @backward
            optimizer.step()
        kept.append(bytearray(32 << 20))  # @keep
        print("epoch", epoch, "loss", float(loss))


if __name__ == "__main__":
    main()
