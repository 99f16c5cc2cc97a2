"""A program that profiles itself with CUPTI (as `torch.profiler` does): @before launches 500
kernels, @start takes CUPTI with the program's own buffers (tests/fake-cuda/fake_profiler.c,
linked against CUPTI), @after launches 300 more, and @stop prints how many kernel records its
own profiler received: 300, with mlprof or without. mlprof counts the 500 launched before and
says from when the program had CUPTI. With LOOKUP=dlsym in the environment the profiler
registers through the function it looked up with `dlsym` (as XLA's does) rather than linked.

argv: FRAMEWORK_LIBRARY PROFILER_LIBRARY
"""
import ctypes
import os
import sys

fw = ctypes.CDLL(sys.argv[1])
rt = ctypes.CDLL("libcudart.so.13")
rt.fake_cuda_set_launch_ns.argtypes = [ctypes.c_uint64]
rt.fake_cuda_set_kernel_name.argtypes = [ctypes.c_char_p]
fw.fw_launch_func.argtypes = [ctypes.c_size_t, ctypes.c_int]
rt.fake_cuda_set_kernel_name(b"step_kernel")
rt.fake_cuda_set_launch_ns(10_000)

if fw.fw_launch_func(0x1000, 500) != 0:  # @before
    sys.exit("a launch failed")
prof = ctypes.CDLL(sys.argv[2])
prof.prof_stop.restype = ctypes.c_long
start = prof.prof_start_looked_up if os.environ.get("LOOKUP") == "dlsym" else prof.prof_start
if start() != 0:  # @start
    sys.exit("the program's profiler could not take CUPTI")
if fw.fw_launch_func(0x1000, 300) != 0:  # @after
    sys.exit("a launch failed")
print("own profiler saw", prof.prof_stop(), "kernels")  # @stop
