"""A daemon this process never waits for (as ray's raylet is): it forks a worker that burns
1.0 s of CPU, reaps the worker itself, and exits unwaited. Known truth: the tree used at least
1.0 s of CPU, which the kernel's `wait4` accounting of the command does not include."""
import os
import time

pid = os.fork()
if pid == 0:
    if os.fork() == 0:  # the daemon, orphaned at once
        worker = os.fork()
        if worker == 0:
            end = time.process_time() + 1.0
            while time.process_time() < end:
                pass
            os._exit(0)
        os.waitpid(worker, 0)
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(1.5)
print("done", flush=True)
