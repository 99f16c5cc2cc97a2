"""Kernels too small to keep the GPU busy, with figures known by construction (the fake CUDA
runtime and CUPTI of tests/fake-cuda; each launch can be made to cost CPU time, as a real
runtime's and a framework's dispatch do).

@cheap launches 4000 kernels of 4 us whose launches cost nothing beyond the hooks: too little
CPU time to matter. @tiny launches 4000 kernels of 4 us each (16 ms of GPU time), each launch
costing 150 us of CPU (0.6 s): the GPU idles, waiting for the CPU. @fat launches 40 kernels of
5 ms (0.2 s of GPU time) at the same CPU cost per launch: the GPU is busy. The order keeps the
checks clear of the sampling's error on a machine busier than its CPUs, where the kernel's
CPU timers fire late and the sample straddling a line's end carries up to about 0.4 s of its
CPU to the next line: @cheap comes first, after little CPU, and @tiny has enough to spare.

argv: FRAMEWORK_LIBRARY
"""
import ctypes
import sys

fw = ctypes.CDLL(sys.argv[1])
rt = ctypes.CDLL("libcudart.so.13")
for knob in ["fake_cuda_set_launch_ns", "fake_cuda_set_launch_cpu_ns"]:
    getattr(rt, knob).argtypes = [ctypes.c_uint64]
rt.fake_cuda_set_kernel_name.argtypes = [ctypes.c_char_p]
fw.fw_launch_func.argtypes = [ctypes.c_size_t, ctypes.c_int]


def kernel(name, ns, cpu_ns):
    rt.fake_cuda_set_kernel_name(name)
    rt.fake_cuda_set_launch_ns(ns)
    rt.fake_cuda_set_launch_cpu_ns(cpu_ns)


def check(result):
    if result != 0:
        sys.exit(f"a CUDA call failed: {result}")


kernel(b"elementwise_mul", 4_000, 0)
check(fw.fw_launch_func(0x3000, 4000))  # @cheap
kernel(b"elementwise_add", 4_000, 150_000)
check(fw.fw_launch_func(0x1000, 4000))  # @tiny
kernel(b"gemm_large", 5_000_000, 150_000)
check(fw.fw_launch_func(0x2000, 40))  # @fat
rt.fake_cuda_set_launch_ns(0)
check(fw.fw_device_sync())
print("done")
