"""40 threads that end, half by pthread_exit (through ctypes), half by returning; then prints
how many POSIX timers the process still has. Under mlprof each thread's CPU-sampling timer must
be deleted however the thread ended: only the main thread's remains."""
import ctypes
import threading
import time

libc = ctypes.CDLL(None)


def leave():
    libc.pthread_exit(None)


def finish():
    pass


for target in (leave, finish) * 20:
    threading.Thread(target=target, daemon=True).start()  # daemon: pthread_exit skips join's lock
    time.sleep(0.01)
time.sleep(0.2)
with open("/proc/self/timers") as timers:
    print("timers left:", sum(1 for line in timers if line.startswith("ID:")))
