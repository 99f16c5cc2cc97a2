"""A spawn Pool of 2 workers that first sit idle for 1 s (in multiprocessing's `-c` bootstrap,
waiting for a task), then each run `work` for 0.3 s of CPU. The bootstrap is not a line of the
program: the work is on `work`'s line, and no line is `<string>`."""
import multiprocessing as mp
import time


def work(_):
    end = time.thread_time() + 0.3
    n = 0
    while time.thread_time() < end:
        n += 1  # @work
    return n > 0


if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        time.sleep(1.0)  # the workers wait for tasks meanwhile
        print(all(pool.map(work, range(2), chunksize=1)))
