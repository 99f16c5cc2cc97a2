"""A program that owns SIGPROF, as profilers and timeouts in user code do: it resets it to its
default (which kills on delivery), installs its own handler with its own ITIMER_PROF and counts
the calls, then ignores it. Known truth: without mlprof it prints what it printed below and
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
print("done", total > 0)
