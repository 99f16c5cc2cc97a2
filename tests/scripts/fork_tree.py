"""A parent holding 300 MiB forks 4 workers (multiprocessing, fork), each allocating 50 MiB
of its own and holding it 1 s. Known truth: the tree holds at most 300 + 4 x 50 = 500 MiB of
heap at once; each worker inherited the parent's 300 MiB and added 50 MiB."""
import multiprocessing
import time

MIB = 1 << 20


def work(_):
    own = bytearray(50 * MIB)  # @worker-alloc
    time.sleep(1.0)
    return len(own)


if __name__ == "__main__":
    held = bytearray(300 * MIB)  # @parent-alloc
    with multiprocessing.get_context("fork").Pool(4) as pool:
        print(sum(pool.map(work, range(4))) // MIB, "MiB in workers")
    print(len(held) // MIB, "MiB in the parent")
