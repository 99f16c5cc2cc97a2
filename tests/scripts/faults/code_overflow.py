"""Fills the ring (every allocation sampled, four threads, the collector stopped meanwhile)
while 20 functions run for the first time; then runs each again. Every function must be named
in the report.

Each function allocates 64 KiB at the start of each run: with an allocation sampled every
512 bytes on average, each run is surely seen by the memory sampler (about 128 samples),
whatever the load. CPU samples are not enough for that: on a machine busier than its cores
the kernel's CPU timer may not fire for a third of a second of a thread's CPU, and 0.1 s of
CPU can then have no sample of its own."""
import os
import signal
import shutil
import sys
import tempfile
import threading
import time

stop = False


def flood():
    while not stop:
        [bytearray(64) for _ in range(1000)]


def burn(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


# The functions live in a module of their own, written to a private directory (code from a
# file, as a user's is: code compiled from a string is charged to the line that ran it).
names = ["first_run_%02d" % i for i in range(20)]
module_dir = tempfile.mkdtemp()
with open(os.path.join(module_dir, "first_runs.py"), "w") as f:
    f.write("from time import thread_time\n")
    for name in names:
        f.write(
            "\n\ndef %s(seconds):\n"
            "    end = thread_time() + seconds\n"
            "    n = 0\n"
            "    kept = [bytearray(4096) for _ in range(16)]\n"
            "    while thread_time() < end:\n"
            "        n += 1\n"
            "    return n\n" % name
        )
sys.path.insert(0, module_dir)
import first_runs  # noqa: E402

namespace = vars(first_runs)

# Under mlprof, stop the collector (our parent) so that the ring surely fills.
profiled = "MLPROF_DIR" in os.environ
if profiled:
    os.kill(os.getppid(), signal.SIGSTOP)
threads = [threading.Thread(target=flood) for _ in range(4)]
for t in threads:
    t.start()
time.sleep(0.3)
for name in names:
    namespace[name](0.02)  # first run, while the ring is full
stop = True
for t in threads:
    t.join()
if profiled:
    os.kill(os.getppid(), signal.SIGCONT)
time.sleep(2.0)  # the collector drains the backlog (slower on a loaded machine)
for _ in range(2):  # again, with room in the ring, twice: its allocations are sampled
    for name in names:
        namespace[name](0.05)
    time.sleep(0.2)
shutil.rmtree(module_dir, ignore_errors=True)
print("ran", len(names), "functions")
sys.exit(0)
