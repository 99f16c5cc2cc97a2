"""GPU kernel time with figures known by construction, through a framework library linked
against a CUDA runtime (tests/fake-cuda: on a machine without a GPU, the fake runtime, which
tells the fake CUPTI beside it of every kernel with the device time it was set to take).

Kernels, per line: @small launches 3000 kernels `gemm_small` of 100 us each (0.3 s of device
time); @large launches 20 kernels `attention_large` of 20 ms each (0.4 s), a handful of
launches that a 1-in-64 sample of launches would mostly miss; @shared launches `gemm_small`
too, 1000 of 100 us (0.1 s): the name's 0.4 s in all is shared between @small and @shared.
@sync waits for all of it. So the process ran 4020 kernels and 0.8 s of device time.
With LARGE_MS in the environment, @large's kernels take that many ms each instead of 20 (for a
diff of two runs).

argv: FRAMEWORK_LIBRARY
"""
import ctypes
import os
import sys

fw = ctypes.CDLL(sys.argv[1])
rt = ctypes.CDLL("libcudart.so.13")  # already loaded by the framework: its knobs
rt.fake_cuda_set_launch_ns.argtypes = [ctypes.c_uint64]
rt.fake_cuda_set_kernel_name.argtypes = [ctypes.c_char_p]


def check(result):
    if result != 0:
        sys.exit(f"a CUDA call failed: {result}")


fw.fw_launch_func.argtypes = [ctypes.c_size_t, ctypes.c_int]
GEMM, ATTENTION = 0x1000, 0x2000  # the kernels' handles


def kernel(name, ns):
    rt.fake_cuda_set_kernel_name(name)
    rt.fake_cuda_set_launch_ns(ns)


kernel(b"gemm_small", 100_000)
check(fw.fw_launch_func(GEMM, 3000))  # @small
kernel(b"attention_large", int(os.environ.get("LARGE_MS", "20")) * 1_000_000)
check(fw.fw_launch_func(ATTENTION, 20))  # @large
kernel(b"gemm_small", 100_000)
check(fw.fw_launch_func(GEMM, 1000))  # @shared
rt.fake_cuda_set_launch_ns(0)
check(fw.fw_device_sync())  # @sync
print("ran 4020 kernels")
