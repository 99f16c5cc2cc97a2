"""A program that blocks SIGTERM and SIGUSR1 and takes them without a handler: with
`sigtimedwait`, or read from a catch-all `signalfd` (every signal, SIGPROF included), as
daemons and event loops do. Group-wide signals must reach it once each, as without mlprof, and
the catch-all signalfd must never read a SIGPROF the program did not cause (mlprof's timer
signals are not its own). Argument: `sigwait`, `signalfd`, or `signalfd_chk` (read through
glibc's `__read_chk`, as a program built with _FORTIFY_SOURCE reads)."""
import ctypes
import os
import select
import signal
import struct
import sys
import time

mode = sys.argv[1]
counts = {"TERM": 0, "USR1": 0, "PROF": 0}
names = {signal.SIGTERM: "TERM", signal.SIGUSR1: "USR1", signal.SIGPROF: "PROF"}
wanted = {signal.SIGTERM, signal.SIGUSR1}

if mode == "sigwait":
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)

    def take(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sum(range(20000))  # on-CPU between waits: mlprof's timer fires meanwhile
            info = signal.sigtimedwait(wanted | {signal.SIGPROF}, 0.01)
            if info is not None:
                counts[names[info.si_signo]] += 1

else:
    libc = ctypes.CDLL(None, use_errno=True)
    everything = ctypes.create_string_buffer(128)  # a sigset_t
    libc.sigfillset(everything)
    libc.sigprocmask(signal.SIG_BLOCK, everything, None)  # every signal, as a catch-all does
    fd = libc.signalfd(-1, everything, os.O_NONBLOCK)
    assert fd >= 0, ctypes.get_errno()
    read_chk = getattr(libc, "__read_chk")
    read_chk.restype = ctypes.c_ssize_t
    read_chk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]

    def take(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sum(range(20000))
            if select.select([fd], [], [], 0.01)[0]:
                if mode == "signalfd_chk":
                    buf = ctypes.create_string_buffer(128 * 8)
                    n = read_chk(fd, buf, 128 * 8, ctypes.sizeof(buf))
                    data = buf.raw[: max(n, 0)]
                else:
                    data = os.read(fd, 128 * 8)
                for i in range(0, len(data), 128):
                    signo = struct.unpack_from("I", data, i)[0]
                    counts[names.get(signo, str(signo))] = counts.get(names.get(signo, str(signo)), 0) + 1


take(0.3)
os.killpg(os.getpgrp(), signal.SIGTERM)
take(1.0)
os.killpg(os.getpgrp(), signal.SIGUSR1)
take(1.0)
print("received:", counts)
