"""ppoll and pselect with a timeout of LONG_MAX seconds on a pipe that a thread writes to after
0.3 s: both must wait for the data (return 1), not return at once."""
import ctypes
import os
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
LONG_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_long) - 1)) - 1


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Pollfd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def burn_then_write(fd):
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:  # on-CPU, so the sampler's signal fires meanwhile
        pass
    os.write(fd, b"x")


def wait_with(name, call):
    r, w = os.pipe()
    t = threading.Thread(target=burn_then_write, args=(w,))
    # Before the thread starts: its 0.3 s then all lie inside the wait however late this
    # thread runs again on a busy machine (timed after, a 50 ms delay read as "too early").
    started = time.perf_counter()
    t.start()
    ret = call(r)
    waited = time.perf_counter() - started
    t.join()
    os.close(r)
    os.close(w)
    print(name, "returned", ret, "after the write" if waited >= 0.25 else "too early")


forever = Timespec(LONG_MAX, 0)


def ppoll(fd):
    fds = Pollfd(fd, 1, 0)  # POLLIN
    return libc.ppoll(ctypes.byref(fds), 1, ctypes.byref(forever), None)


def pselect(fd):
    fdset = (ctypes.c_ulong * 16)()
    fdset[fd // 64] |= 1 << (fd % 64)
    return libc.pselect(fd + 1, ctypes.byref(fdset), None, None, ctypes.byref(forever), None)


wait_with("ppoll", ppoll)
wait_with("pselect", pselect)
sys.exit(0)
