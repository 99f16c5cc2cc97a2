"""A data loader with worker processes (multiprocessing.Pool, fork), like a PyTorch
DataLoader with num_workers=4: each worker decodes a "batch" into a numpy array and sends a
small summary back.

Run:
    mlprof run -- python examples/dataloader_workers.py

What the report should show:
  - five Python processes in the profile (`processes` in `-o out.json`: the parent and four
    fork children, `forked: true`), the children with the CPU time;
  - the `batch = ...` line in `load_batch` allocating about 40 x 32 MiB = 1.25 GiB across the
    workers and holding several 32 MiB batches at the tree's heap peak (one per busy worker);
  - the `augment` line (`np.sqrt`) as native time in the workers;
  - the parent's `pool.imap` line mostly waiting.
  The tree's peak heap adds up the processes' heaps, and each fork child starts from a copy
  of its parent's heap (`inherited_heap_bytes`), so the inherited ~13 MiB counts once per
  worker although the pages are shared copy-on-write: about 13 + 4 x (13 + 32) = 195 MiB.
  Workers that the Pool ends with SIGTERM when the `with` block exits show exit `unknown`.
"""
import multiprocessing as mp

import numpy as np

BATCH_BYTES = 32 * 2**20


def augment(batch):
    return np.sqrt(batch, out=batch)  # native, in place


def load_batch(index):
    rng = np.random.default_rng(index)
    batch = rng.random(BATCH_BYTES // 8)  # a decoded batch: 32 MiB
    batch = augment(batch)
    return index, float(batch.mean())


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    with ctx.Pool(4) as pool:
        means = [m for _, m in pool.imap(load_batch, range(40))]
    print(f"{len(means)} batches, mean of means {sum(means) / len(means):.4f}")
