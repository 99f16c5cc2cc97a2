"""Fork workers idle while the main process computes (as DataLoader workers wait for
indices): each worker's stack has the `@pool` line at its bottom, inherited at the fork, and
waits for tasks inside multiprocessing. Known truth: the main thread computes for 2 s on the
`@compute` line; the two workers wait about as long, holding nothing up."""
import multiprocessing as mp
import time


def square(x):
    return x * x


def compute(seconds):
    total, end = 0, time.thread_time() + seconds
    while time.thread_time() < end:
        total += sum(range(1000))  # @compute
    return total


if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:  # @pool
        pool.map(square, range(10))
        compute(2.0)
    print("done", flush=True)
