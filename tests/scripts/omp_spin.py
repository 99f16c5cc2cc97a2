"""A pool with more threads than work: each OpenMP region of tests/native/omp_work.c's
`omp_one_works` (path in argv[1]) has its first thread do all the work while the others wait
for it at a barrier (spinning, with OMP_WAIT_POLICY=active), called from one line. Prints, as
JSON, the truth the C side measured with each thread's own CPU clock: `waited`, the CPU the
team used waiting at and between the regions, and `worked`, the working thread's CPU. The
loop runs for 1.5 s of the process's CPU, not of wall time, so that a busy machine does not
shrink it."""
import ctypes
import json
import sys
import time

lib = ctypes.CDLL(sys.argv[1])
lib.omp_one_works.restype = ctypes.c_double
lib.omp_one_works.argtypes = [
    ctypes.c_int,
    ctypes.c_long,
    ctypes.POINTER(ctypes.c_double),
    ctypes.POINTER(ctypes.c_double),
]
waited, worked = ctypes.c_double(0.0), ctypes.c_double(0.0)
start = time.process_time()
while time.process_time() - start < 1.5:
    lib.omp_one_works(20, 1_000_000, ctypes.byref(waited), ctypes.byref(worked))  # @spin
print(json.dumps({"waited": waited.value, "worked": worked.value}))
