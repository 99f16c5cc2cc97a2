"""A program that owns SIGPROF, as profilers and timeouts in user code do: it resets it to its
default (which kills on delivery), installs its own handler with its own ITIMER_PROF and counts
the calls, then ignores it, then does both again from C (glibc's signal(), which bypasses the
exported sigaction). Known truth: without mlprof it prints what it printed below and
exits 0; mlprof must change neither (a program that reset SIGPROF used to be killed by
mlprof's next timer signal), and must go on sampling."""
import signal

signal.signal(signal.SIGPROF, signal.SIG_DFL)
total = sum(i * i for i in range(2_000_000))  # @default
calls = 0


def handler(sig, frame):
    global calls
    calls += 1


print("previous:", signal.signal(signal.SIGPROF, handler))
signal.setitimer(signal.ITIMER_PROF, 0.01, 0.01)
while calls < 30:
    total += sum(i for i in range(1000))  # @own
signal.setitimer(signal.ITIMER_PROF, 0, 0)
print("own handler kept:", signal.getsignal(signal.SIGPROF) is handler, "calls >= 30:", calls >= 30)
signal.signal(signal.SIGPROF, signal.SIG_IGN)
print("ignored:", signal.getsignal(signal.SIGPROF) == signal.SIG_IGN)
total += sum(i * i for i in range(2_000_000))  # @ignored
# From C, through glibc's signal() and sysv_signal(), which do not call the exported sigaction.
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
for name in ("signal", "sysv_signal"):
    getattr(libc, name).restype = ctypes.c_void_p
    getattr(libc, name).argtypes = [ctypes.c_int, ctypes.c_void_p]
print("C signal() previous was SIG_IGN:", libc.signal(signal.SIGPROF, 0) == 1)
total += sum(i * i for i in range(2_000_000))  # @c_default
print("C sysv_signal() previous was SIG_DFL:", libc.sysv_signal(signal.SIGPROF, 1) in (0, None))
total += sum(i * i for i in range(2_000_000))  # @c_ignored
print("done", total > 0)
