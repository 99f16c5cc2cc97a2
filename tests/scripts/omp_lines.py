"""An OpenMP parallel loop (tests/native/omp_work.c, path in argv[1]) called from one line,
between two lines of pure Python. Known truth: the OpenMP team's CPU, main thread and pool
threads alike, is caused by the `@omp` line. The loop runs for 1.5 s of the process's CPU (all
its threads), not of wall time, so that a machine busy with other work does not shrink it."""
import ctypes
import sys
import time

lib = ctypes.CDLL(sys.argv[1])
lib.omp_work.restype = ctypes.c_double
lib.omp_work.argtypes = [ctypes.c_int, ctypes.c_long]


def python_work(seconds):
    total, end = 0, time.thread_time() + seconds
    while time.thread_time() < end:
        total += sum(i for i in range(1000))  # @python
    return total


python_work(0.2)
start = time.process_time()
while time.process_time() - start < 1.5:
    lib.omp_work(20, 2_000_000)  # @omp
python_work(0.2)
print("done")
