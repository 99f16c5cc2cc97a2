"""CUDA driver calls with figures known by construction, reached the ways frameworks reach the
driver (tests/fake-cuda: on a machine without a GPU, a fake libcuda.so.1 and runtime).

Device memory, per line: @dlsym_alloc 64 MiB looked up by ctypes (dlsym through a handle),
kept; @tmp 16 MiB, given back on the next line; @proc_alloc 32 MiB through the function
`cuGetProcAddress` hands out for "cuMemAlloc" (the fake's internal entry, as a real driver
may), kept; @old_alloc 8 MiB through the CUDA 3.0 "cuMemAlloc" (32-bit sizes: the profiler
must hand it out unchanged and see nothing); @future_alloc 2 MiB through "cuMemAlloc" asked
for at CUDA 14.0, a version whose signatures the profiler does not know (handed out unchanged,
not seen); @vmm 2 x 20 MiB of physical memory on device 1
(`cuMemCreate`, PyTorch's expandable segments, reached through the runtime's
`cudaGetDriverEntryPointByVersion`), one given back at @vmm_release; @direct 12 MiB by a
library linked against the driver; @nested 4 MiB through the runtime's `cudaMalloc`, which
gets it from the driver: once, not twice.

Copies: @h2d 8 MiB host to device (`cuMemcpyHtoD`, through `cuGetProcAddress`); @d2h 3 MiB
device to host (async, dlsym); @unified 2 MiB device to host through `cuMemcpy` (the
direction asked of the driver); @ptsz 1 MiB host to device through the per-thread-stream
variant `cuGetProcAddress` hands out.

Launches: @launch 300 kernels. Waits: @sync waits 0.2 s in `cuCtxSynchronize` (with WAIT_TIMES
in the environment, the call's wall time as measured around it is written there, as JSON: on a
busy machine waking up may take longer than the fake's sleep).

@next: `dlsym(RTLD_NEXT)` from a library still finds the object after that library.

argv: LIBCUDA DRIVER_FRAMEWORK RUNTIME_FRAMEWORK NEXT_PROBE
"""
import ctypes
import json
import os
import sys
import time
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p

cu = ctypes.CDLL(sys.argv[1])
drv = ctypes.CDLL(sys.argv[2])
fw = ctypes.CDLL(sys.argv[3])
probe = ctypes.CDLL(sys.argv[4])
rt = ctypes.CDLL("libcudart.so.13")  # loaded by the runtime framework

MiB = 1 << 20
ALLOC = ctypes.CFUNCTYPE(c_int, POINTER(c_uint64), c_size_t)
ALLOC_V1 = ctypes.CFUNCTYPE(c_int, POINTER(c_uint), c_uint)
CREATE = ctypes.CFUNCTYPE(c_int, POINTER(c_uint64), c_size_t, c_void_p, c_uint64)
RELEASE = ctypes.CFUNCTYPE(c_int, c_uint64)
HTOD = ctypes.CFUNCTYPE(c_int, c_uint64, c_void_p, c_size_t)
HTOD_ASYNC = ctypes.CFUNCTYPE(c_int, c_uint64, c_void_p, c_size_t, c_void_p)
cu.cuMemAlloc_v2.argtypes = [POINTER(c_uint64), c_size_t]
cu.cuMemFree_v2.argtypes = [c_uint64]
cu.cuMemcpyDtoHAsync_v2.argtypes = [c_void_p, c_uint64, c_size_t, c_void_p]
cu.cuMemcpy.argtypes = [c_uint64, c_uint64, c_size_t]
cu.cuLaunchKernel.argtypes = [c_void_p] + [c_uint] * 7 + [c_void_p] * 3
cu.cuGetProcAddress_v2.argtypes = [ctypes.c_char_p, POINTER(c_void_p), c_int, c_uint64,
                                   POINTER(c_int)]
cu.fake_cu_set_launch_ns.argtypes = [c_uint64]
drv.fwd_alloc.argtypes = [c_size_t]
drv.fwd_alloc.restype = c_uint64
fw.fw_alloc.argtypes = [c_size_t]
fw.fw_alloc.restype = c_uint64
rt.cudaGetDriverEntryPointByVersion.argtypes = [ctypes.c_char_p, POINTER(c_void_p), c_uint,
                                                c_uint64, POINTER(c_int)]


def check(result):
    if result != 0:
        sys.exit(f"a CUDA call failed: {result}")


def proc(name, kind, version=12000, flags=0):
    fn = c_void_p()
    status = c_int()
    check(cu.cuGetProcAddress_v2(name, byref(fn), version, flags, byref(status)))
    return kind(fn.value)


def entry_point(name, kind):
    fn = c_void_p()
    status = c_int()
    check(rt.cudaGetDriverEntryPointByVersion(name, byref(fn), 12030, 0, byref(status)))
    return kind(fn.value)


class Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", c_int), ("handle_types", c_int), ("location_type", c_int),
                ("location_id", c_int), ("win32", c_void_p), ("flags", ctypes.c_ubyte * 8)]


def reserve():
    dev = c_uint64()
    check(cu.cuMemAlloc_v2(byref(dev), 64 * MiB))  # @dlsym_alloc
    tmp = c_uint64()
    check(cu.cuMemAlloc_v2(byref(tmp), 16 * MiB))  # @tmp
    check(cu.cuMemFree_v2(tmp))
    other = c_uint64()
    check(proc(b"cuMemAlloc", ALLOC)(byref(other), 32 * MiB))  # @proc_alloc
    old = c_uint()
    check(proc(b"cuMemAlloc", ALLOC_V1, version=3000)(byref(old), 8 * MiB))  # @old_alloc
    future = c_uint64()
    check(proc(b"cuMemAlloc", ALLOC, version=14000)(byref(future), 2 * MiB))  # @future_alloc
    create = entry_point(b"cuMemCreate", CREATE)
    release = entry_point(b"cuMemRelease", RELEASE)
    prop = Prop(type=1, location_type=1, location_id=1)
    handles = [c_uint64(), c_uint64()]
    for h in handles:
        check(create(byref(h), 20 * MiB, ctypes.addressof(prop), 0))  # @vmm
    check(release(handles[1]))  # @vmm_release
    assert drv.fwd_alloc(12 * MiB)  # @direct
    assert fw.fw_alloc(4 * MiB)  # @nested
    return dev


def copy(dev):
    host = ctypes.create_string_buffer(8 * MiB)
    src = ctypes.addressof(host)
    check(proc(b"cuMemcpyHtoD", HTOD)(dev.value, src, 8 * MiB))  # @h2d
    check(cu.cuMemcpyDtoHAsync_v2(src, dev, 3 * MiB, None))  # @d2h
    check(cu.cuMemcpy(src, dev.value, 2 * MiB))  # @unified
    ptsz = proc(b"cuMemcpyHtoDAsync", HTOD_ASYNC, flags=2)
    check(ptsz(dev.value, src, 1 * MiB, None))  # @ptsz


def launch_and_wait():
    for _ in range(300):
        check(cu.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None))  # @launch
    cu.fake_cu_set_launch_ns(200_000_000)
    check(cu.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None))
    t = time.perf_counter()
    check(cu.cuCtxSynchronize())  # @sync
    if os.environ.get("WAIT_TIMES"):
        with open(os.environ["WAIT_TIMES"], "w") as f:
            json.dump({"sync": time.perf_counter() - t}, f)


dev = reserve()
copy(dev)
launch_and_wait()
print("next", probe.next_probe())  # @next
print("driver calls done")
