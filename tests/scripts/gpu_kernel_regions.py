"""Two regions (mlprof.mark) launching kernels of known device time from the very same line
(the fake CUDA runtime and CUPTI of tests/fake-cuda): region "short" 100 kernels of 1 ms
(0.1 s of GPU time), region "long" 100 of 3 ms (0.3 s); @launch holds 0.4 s in the whole run.

argv: FRAMEWORK_LIBRARY
"""
import ctypes
import sys

import mlprof

fw = ctypes.CDLL(sys.argv[1])
rt = ctypes.CDLL("libcudart.so.13")
rt.fake_cuda_set_launch_ns.argtypes = [ctypes.c_uint64]
rt.fake_cuda_set_kernel_name.argtypes = [ctypes.c_char_p]
fw.fw_launch_func.argtypes = [ctypes.c_size_t, ctypes.c_int]
rt.fake_cuda_set_kernel_name(b"step_kernel")


def launch(n):
    assert fw.fw_launch_func(0x1000, n) == 0  # @launch


for name, ns in [("short", 1_000_000), ("long", 3_000_000)]:
    with mlprof.mark(name):
        rt.fake_cuda_set_launch_ns(ns)
        launch(100)
print("regions done")
