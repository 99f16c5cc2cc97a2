"""A parent and two `multiprocessing` children (start method from argv[1]: fork or spawn),
each child sleeping 2 s at one line while the parent joins them (py-spy's subprocess test,
shorter). Known truth: each child spends 2 s waiting on the `sleep` line."""
import multiprocessing
import sys
import time


def target():
    time.sleep(2)  # @child-sleep


if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1] if len(sys.argv) > 1 else "fork")
    procs = [ctx.Process(target=target) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()  # @parent-join
    print("children done")
