"""Blocking waits given timeouts the kernel refuses ({-1,0}, {0,-1}, {0,2e9}, {0,LONG_MAX}) or
negative millisecond timeouts ("forever"). Each call prints its return value, errno and whether
it returned in under 0.5 s; the output must be the same with and without mlprof.

Waits on a pipe that a timer writes to after 1 s, so a call that wrongly waits ends then (and
says "slow") instead of hanging the test."""
import ctypes
import errno
import os
import select
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
LONG_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_long) - 1)) - 1
CLOCK_MONOTONIC = 1
TIMER_ABSTIME = 1


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Pollfd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


class EpollEvent(ctypes.Structure):
    if os.uname().machine == "x86_64":
        _pack_ = 1  # packed on x86-64 only
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]


BAD = [(-1, 0), (0, -1), (0, 2000000000), (0, LONG_MAX), (-1, -1)]


def name(e):
    return errno.errorcode.get(e, str(e)) if e else "0"


def timed(label, call, pipe=True):
    """Run call(read_fd) with a timer writing to the pipe after 1 s; print what it gave."""
    r, w = os.pipe()
    timer = threading.Timer(1.0, os.write, (w, b"x"))
    if pipe:
        timer.start()
    ctypes.set_errno(0)
    started = time.monotonic()
    ret = call(r)
    err = ctypes.get_errno()
    took = time.monotonic() - started
    if pipe:
        timer.cancel()
        timer.join()
    os.close(r)
    os.close(w)
    print(label, "->", ret, "errno", name(err), "fast" if took < 0.5 else "slow", flush=True)


def fdset(fd):
    s = (ctypes.c_ulong * 16)()
    s[fd // 64] |= 1 << (fd % 64)
    return s


for sec, nsec in BAD:
    ts = Timespec(sec, nsec)
    tag = "{%d,%d}" % (sec, nsec)

    def ppoll(fd, ts=ts):
        fds = Pollfd(fd, select.POLLIN, 0)
        return libc.ppoll(ctypes.byref(fds), 1, ctypes.byref(ts), None)

    def pselect(fd, ts=ts):
        s = fdset(fd)
        return libc.pselect(fd + 1, ctypes.byref(s), None, None, ctypes.byref(ts), None)

    def nanosleep(_fd, ts=ts):
        rem = Timespec(0, 0)
        return libc.nanosleep(ctypes.byref(ts), ctypes.byref(rem))

    def clock_nanosleep(_fd, ts=ts):
        rem = Timespec(0, 0)
        return libc.clock_nanosleep(CLOCK_MONOTONIC, 0, ctypes.byref(ts), ctypes.byref(rem))

    def clock_nanosleep_abs(_fd, ts=ts):
        return libc.clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ctypes.byref(ts), None)

    timed("ppoll " + tag, ppoll)
    timed("pselect " + tag, pselect)
    timed("nanosleep " + tag, nanosleep, pipe=False)
    timed("clock_nanosleep " + tag, clock_nanosleep, pipe=False)
    timed("clock_nanosleep abs " + tag, clock_nanosleep_abs, pipe=False)

# select's timeval: a negative part is EINVAL; glibc and the kernel carry a tv_usec of a
# million or more into seconds (so {0,2000000} waits for the timer's write).
for sec, usec in [(-1, 0), (0, -1), (0, 2000000)]:
    tv = Timeval(sec, usec)

    def select_(fd, tv=tv):
        s = fdset(fd)
        return libc.select(fd + 1, ctypes.byref(s), None, None, ctypes.byref(tv))

    timed("select {%d,%d}" % (sec, usec), select_)

# A negative millisecond timeout is "forever": these wait for the timer's write.
for ms in (-1, -5):

    def poll(fd, ms=ms):
        fds = Pollfd(fd, select.POLLIN, 0)
        return libc.poll(ctypes.byref(fds), 1, ms)

    def epoll_pwait(fd, ms=ms):
        ep = libc.epoll_create1(0)
        ev = EpollEvent(select.EPOLLIN, fd)
        libc.epoll_ctl(ep, 1, fd, ctypes.byref(ev))  # EPOLL_CTL_ADD
        out = (EpollEvent * 4)()
        ret = libc.epoll_pwait(ep, out, 4, ms, None)
        os.close(ep)  # not through ctypes: leaves the errno it reports alone
        return ret

    timed("poll %d" % ms, poll)
    timed("epoll_pwait %d" % ms, epoll_pwait)

sys.exit(0)
