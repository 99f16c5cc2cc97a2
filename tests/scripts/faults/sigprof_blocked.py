"""A program that blocks SIGPROF: the main thread around a first loop (then unblocks it), and a
thread that blocks it for good before its own loop. Known truth: it prints the same lines and
exits 0 with or without mlprof; a SIGPROF it blocks stays blocked (its pending set says so),
and the report names the thread that never unblocked it and the span the main thread blocked
it, rather than showing their lines short of CPU without a word; a subprocess run meanwhile adds
no span."""
import signal
import subprocess
import threading
import time


def spin(seconds):
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += 1
    return n


old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
print("blocked before:", signal.SIGPROF in old)
spin(0.4)  # @main_blocked
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPROF})
spin(0.3)  # @main_open


def worker():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    spin(0.4)  # @thread_blocked
    print("thread still blocks SIGPROF:", signal.SIGPROF in signal.pthread_sigmask(signal.SIG_BLOCK, []))


t = threading.Thread(target=worker, name="blocker")
t.start()
t.join()
# CPython's subprocess blocks every signal around its vfork and unblocks it after: no span
# (the vfork child's own mask change used to leave the parent's span open to its end).
subprocess.run(["true"], check=True)
spin(0.3)
print("done")
