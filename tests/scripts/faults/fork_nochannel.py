"""A fork child that cannot create its own channel (no file descriptor left) allocates 200 MB
and exits 5: nothing of it may land in the parent's figures."""
import os
import resource
import sys
import time

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
sys.stdout.flush()
limit = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
while True:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        os.close(os.open("/dev/null", os.O_RDONLY))  # still room for one more descriptor
    except OSError:
        break
    limit -= 1
pid = os.fork()
if pid == 0:
    block = bytearray(200 * 1000 * 1000)
    block[::4096] = b"x" * len(block[::4096])
    time.sleep(0.2)
    os._exit(5)
_, status = os.waitpid(pid, 0)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("child exited", os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8)
sys.exit(0)
