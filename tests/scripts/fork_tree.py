"""A parent holding 300 MiB (touched; argv[1] MiB if given) forks 4 workers (multiprocessing, fork); each reads all
of the inherited 300 MiB and allocates (and touches) 50 MiB of its own, holding it 1 s.
Known truth: the tree holds at most 300 + 4 x 50 = 500 MiB of heap at once, and about as much
resident memory (the inherited pages are shared, not copied); each worker inherited the
parent's 300 MiB and added 50 MiB."""
import multiprocessing
import time

MIB = 1 << 20
held = b""


def work(_):
    seen = sum(held[::4096])  # every inherited page, read
    own = bytearray(b"\x01") * (50 * MIB)  # @worker-alloc
    time.sleep(1.0)
    return len(own) + 0 * seen


if __name__ == "__main__":
    import sys

    parent_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    held = b"\x01" * (parent_mib * MIB)  # @parent-alloc
    with multiprocessing.get_context("fork").Pool(4) as pool:
        print(sum(pool.map(work, range(4))) // MIB, "MiB in workers")
    print(len(held) // MIB, "MiB in the parent")
