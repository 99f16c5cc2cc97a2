"""An alternate signal stack the size faulthandler gives (SIGSTKSZ + MINSIGSTKSZ, about 10 KB),
in memory the program owns, with 64 KiB of canary bytes below it: the profiler's signal
handler must neither run on it nor write below it. Python CPU work with a deep stack runs
while it is installed; then the canary is checked (exit 3 if touched).

With faulthandler itself (pytest enables it) the stack is a heap block, and writes below it
corrupt the heap; this makes the same layout visible."""
import ctypes
import faulthandler
import time

GUARD = 64 * 1024
ALT = 9968
CANARY = 0xA5

faulthandler.enable()  # its own alternate stack, replaced below by ours


class StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


block = (ctypes.c_ubyte * (GUARD + ALT))()
ctypes.memset(block, CANARY, GUARD + ALT)
libc = ctypes.CDLL(None, use_errno=True)
ss = StackT(ctypes.addressof(block) + GUARD, 0, ALT)
if libc.sigaltstack(ctypes.byref(ss), None) != 0:
    raise OSError(ctypes.get_errno(), "sigaltstack")


def deep(n):
    if n == 0:
        end = time.thread_time() + 1.5  # @loop
        total = 0
        while time.thread_time() < end:
            total += sum(i * i for i in range(200))  # @work
        return total
    return deep(n - 1) + 1


deep(60)
touched = sum(1 for b in bytes(block)[:GUARD] if b != CANARY)
# The stack is given up before its memory is (as faulthandler gives its own up at shutdown): a
# signal landing on freed memory would corrupt the heap, with or without a profiler (mlprof's
# timer signals made that happen 1 run in 12 when this script left it registered).
disable = StackT(None, 2, 0)  # SS_DISABLE
if libc.sigaltstack(ctypes.byref(disable), None) != 0:
    raise OSError(ctypes.get_errno(), "sigaltstack")
print("canary bytes touched:", touched)
raise SystemExit(3 if touched else 0)
