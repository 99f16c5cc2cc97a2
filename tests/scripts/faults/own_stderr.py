"""A program that writes its own stderr (a warning, a partial line with no newline) and blocks
SIGPROF, mlprof's sampling signal, for 0.3 s of CPU in each of two processes (the parent and a
fork child), unblocking it after. Known truth: each process's span used 0.3 s of CPU that went
to one sample, so the profile has one true warning per process; with `-q` the program's stderr
is byte for byte what it is without mlprof; with `-o` mlprof adds at most one line."""
import os
import signal
import sys
import time
import warnings


def blocked_spin(seconds):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += 1
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPROF})
    return n


warnings.warn("the program's own warning")
pid = os.fork()
if pid == 0:
    blocked_spin(0.3)
    sys.stderr.write("child done\n")
    sys.stderr.flush()
    os._exit(0)
blocked_spin(0.3)
os.waitpid(pid, 0)
sys.stderr.write("no newline at the end")
sys.stderr.flush()
