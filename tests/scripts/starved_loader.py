"""A training loop starved by its data loader, as with a DataLoader whose 2 workers are too
slow: a `multiprocessing` pool of 2 forked workers makes each batch (0.25 s of CPU), the loop
consumes it in 5 ms. Known truth: the main thread waits for batches at the `@loop` line, for as
long as the script measures itself around each `next()` (printed on stderr as `waited S`);
its workers compute meanwhile. It is the most common DataLoader problem: the report must show
that waiting on the loop line, named as waiting for worker processes."""
import multiprocessing
import sys
import time


def make_batch(i):
    end = time.thread_time() + 0.25
    while time.thread_time() < end:  # @work
        pass
    return i


def train_step(batch):
    end = time.thread_time() + 0.005
    while time.thread_time() < end:  # @train
        pass


if __name__ == "__main__":
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    waited = 0.0
    with multiprocessing.get_context("fork").Pool(2) as pool:
        it = pool.imap(make_batch, range(batches))
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)  # @loop
            except StopIteration:
                break
            waited += time.perf_counter() - t
            train_step(batch)
    print("waited %.3f" % waited, file=sys.stderr, flush=True)
    print("trained", batches, flush=True)
