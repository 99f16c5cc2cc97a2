"""argv: PIDFILE CODE: fork a child that sleeps 60 s (an orphan once this process exits; its
pid is written to PIDFILE, its stdio goes to /dev/null so it holds no pipe of the caller's),
print "parent done", exit with CODE.
"""
import os
import sys
import time

pid = os.fork()
if pid == 0:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    time.sleep(60)
    os._exit(0)
with open(sys.argv[1], "w") as f:
    f.write(str(pid))
print("parent done", flush=True)
sys.exit(int(sys.argv[2]))
