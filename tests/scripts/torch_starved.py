"""A training loop starved by its torch DataLoader, when torch is importable (else it says it
skipped): 2 workers make each batch in 0.2 s of CPU (a slow transform), the step takes a few
ms. Known truth: the main thread waits for batches at the `@loop` line for as long as the
script measures around each `next()` (printed on stderr as `waited S`)."""
import sys
import time

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError:
    print("skipped: torch not installed")
    sys.exit(0)


class Slow(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        end = time.thread_time() + 0.05
        while time.thread_time() < end:  # @transform
            pass
        return torch.full((64,), float(i))


if __name__ == "__main__":
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 1)
    loader = DataLoader(Slow(), batch_size=4, num_workers=2)
    waited, it = 0.0, iter(loader)
    while True:
        t = time.perf_counter()
        try:
            xb = next(it)  # @loop
        except StopIteration:
            break
        waited += time.perf_counter() - t
        model(xb).sum().backward()  # @step
    print("waited %.3f" % waited, file=sys.stderr, flush=True)
    print("trained", flush=True)
