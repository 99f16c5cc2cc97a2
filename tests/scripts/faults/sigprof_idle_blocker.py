"""A helper thread that blocks every signal by design and waits for the whole run (as PyTorch's
`resource_sharer` listener and jemalloc's background threads do), while the main thread
computes for 0.5 s. Known truth: the helper uses no CPU, so no CPU is missing from any line,
and nothing is said about SIGPROF on stderr or in the profile."""
import signal
import threading
import time

ready = threading.Event()
stop = threading.Event()


def helper():
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))
    ready.set()
    stop.wait()


t = threading.Thread(target=helper, daemon=True)
t.start()
ready.wait()
end = time.process_time() + 0.5
n = 0
while time.process_time() < end:  # @spin
    n += 1
print("done", n > 0)
stop.set()
t.join()
