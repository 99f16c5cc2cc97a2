"""Fork one child that allocates and keeps CHILD_MB megabytes, then exits 5; the parent
keeps PARENT_MB. Ground truth: two processes, the child marked as forked."""
import os
import sys

child_mb, parent_mb = int(sys.argv[1]), int(sys.argv[2])
pid = os.fork()
if pid == 0:
    kept = bytearray(child_mb * 10**6)
    os._exit(5)
kept = bytearray(parent_mb * 10**6)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 5
