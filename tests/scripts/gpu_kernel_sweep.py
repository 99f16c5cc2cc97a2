"""GPU time that grows with a parameter, known by construction (the fake CUDA runtime and
CUPTI of tests/fake-cuda): @linear launches N kernels of 1 ms, @square N*N kernels of 1 ms
(a different kernel each), so their GPU time grows as N and N^2.

argv: FRAMEWORK_LIBRARY N
"""
import ctypes
import sys

fw = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2])
rt = ctypes.CDLL("libcudart.so.13")
rt.fake_cuda_set_launch_ns.argtypes = [ctypes.c_uint64]
rt.fake_cuda_set_kernel_name.argtypes = [ctypes.c_char_p]
fw.fw_launch_func.argtypes = [ctypes.c_size_t, ctypes.c_int]
rt.fake_cuda_set_launch_ns(1_000_000)
rt.fake_cuda_set_kernel_name(b"linear_kernel")
assert fw.fw_launch_func(0x1000, n) == 0  # @linear
rt.fake_cuda_set_kernel_name(b"square_kernel")
assert fw.fw_launch_func(0x2000, n * n) == 0  # @square
print("launched", n + n * n)
