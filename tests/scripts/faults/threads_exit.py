"""Threads that end the ways real programs end them. argv[1] picks one:
daemon  - daemon threads still waking every millisecond at interpreter exit (as tqdm's monitor
          and log shippers do): CPython ends them with pthread_exit during finalization
exit    - a thread that calls pthread_exit itself through ctypes
cancel  - a daemon thread blocked in poll() cancelled with pthread_cancel
Prints what it did, then exits with status 7."""
import ctypes
import select
import sys
import threading
import time

libc = ctypes.CDLL(None)
mode = sys.argv[1]


def spin_sleep():
    while True:
        time.sleep(0.001)


def burn(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


if mode == "daemon":
    for _ in range(8):
        threading.Thread(target=spin_sleep, daemon=True).start()
    burn(0.2)
    print("daemon threads left running")
elif mode == "exit":
    done = []

    def leave():
        done.append(1)
        libc.pthread_exit(None)
        done.append(2)  # never reached

    for _ in range(4):
        t = threading.Thread(target=leave, daemon=True)
        t.start()
    time.sleep(0.3)
    print("threads that called pthread_exit:", len(done))
elif mode == "cancel":
    started = threading.Event()

    def blocked():
        p = select.poll()
        started.set()
        p.poll(-1)  # forever, until cancelled

    t = threading.Thread(target=blocked, daemon=True)
    t.start()
    started.wait()
    time.sleep(0.1)
    print("cancel:", libc.pthread_cancel(ctypes.c_ulong(t.ident)))
    time.sleep(0.2)
    burn(0.1)
else:
    raise SystemExit("unknown mode " + mode)
sys.stdout.flush()
sys.exit(7)
