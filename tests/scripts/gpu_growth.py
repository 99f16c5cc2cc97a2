"""GPU memory that grows with a parameter, known by construction, through a framework library
linked against a CUDA runtime (tests/fake-cuda: without a GPU, the fake runtime).

For N (argv 2, or the environment's N): @gpu_scratch reserves N MiB and gives it back before
the rest (reserved, never held at the peak); @gpu_linear reserves and keeps N MiB; @gpu_square
N * N MiB. The process's device peak is N + N * N MiB, at the end.

argv: FRAMEWORK_LIBRARY N
"""
import ctypes
import sys

fw = ctypes.CDLL(sys.argv[1])
fw.fw_alloc.restype = ctypes.c_uint64
fw.fw_alloc.argtypes = [ctypes.c_size_t]
fw.fw_free.argtypes = [ctypes.c_uint64]

MiB = 1 << 20
n = int(sys.argv[2])

scratch = fw.fw_alloc(n * MiB)  # @gpu_scratch
if fw.fw_free(scratch) != 0:
    sys.exit("cudaFree failed")
linear = fw.fw_alloc(n * MiB)  # @gpu_linear
square = fw.fw_alloc(n * n * MiB)  # @gpu_square
assert scratch and linear and square
print("held", n + n * n, "MiB")
