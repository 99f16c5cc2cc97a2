"""CUDA calls with figures known by construction, made through a framework library linked
against a CUDA runtime (tests/fake-cuda: on a machine without a GPU, the fake runtime).

Device memory, per line: @keep reserves 3 x 96 MiB and keeps it; @tmp 40 MiB, given back
before the peak; @async 24 MiB (stream-ordered), kept; @managed 8 MiB managed memory, kept;
@peak 160 MiB, reserved at the peak and given back after it. So the process's device peak is
96*3 + 24 + 8 + 160 = 480 MiB, held by @keep (288), @async (24), @managed (8) and @peak (160).
Pinned host memory: @pinned 6 MiB (kept), @pinned_tmp 2 MiB (given back).

Copies: @h2d 5 x 4 MiB host to device (synchronous); @d2h 3 x 1 MiB device to host (async);
@d2d 2 MiB device to device named by the pointers only (`cudaMemcpyDefault`); @peer 1 MiB
between devices; @copy2d a 2-D copy of 512 x 256 bytes host to device.

Launches: @launch 2000 kernels of 100 us of GPU time each (0.2 s queued); @graph 50 graph
launches of no GPU time.

Waits: @sync waits 0.2 s in `cudaStreamSynchronize` for @launch's kernels, sleeping;
@spin queues 0.3 s more and waits for it in `cudaDeviceSynchronize` spinning on the CPU (the
runtime's default); @event waits 0.15 s in `cudaEventSynchronize`, sleeping.

Launch counting: @many launches 64000 kernels of no GPU time (MANY_LAUNCHES in the environment:
that many instead).

The program's CUDA error state: @unknown_direction copies with `cudaMemcpyDefault` while an
error is pending (7): the profiler must not ask the runtime about the pointers then (that could
change the error the program reads next), so the copy's direction is not known; the program
then prints the pending error.

With PINNED_STEPS in the environment (default 0), @pinned_grow pins 4 MiB of host memory that
many times and keeps every block to the end, and @pinned_reuse pins 4 MiB as often and gives
each block back before the next.

With WAIT_TIMES in the environment, the wall time each wait took (`perf_counter` around the
call: on a machine busy with other work, waking up may take longer than the fake's sleep) is
written there as JSON, `{"sync": s, "spin": s, "event": s}`.

With H2D_STEPS in the environment, @h2d copies that many times (default 5).
With KEEP_MIB in the environment, @keep's three blocks are that many MiB each instead of 96
(for a diff of two runs).

argv: FRAMEWORK_LIBRARY
"""
import ctypes
import json
import os
import sys
import time

fw = ctypes.CDLL(sys.argv[1])
rt = ctypes.CDLL("libcudart.so.13")  # already loaded by the framework: its knobs
for name in ["fw_alloc", "fw_alloc_async", "fw_alloc_managed", "fw_host_alloc",
             "fw_host_alloc_flags"]:
    getattr(fw, name).restype = ctypes.c_uint64
for name in ["fw_alloc", "fw_alloc_async", "fw_alloc_managed", "fw_host_alloc",
             "fw_host_alloc_flags"]:
    getattr(fw, name).argtypes = [ctypes.c_size_t]
for name in ["fw_free", "fw_free_async", "fw_free_host"]:
    getattr(fw, name).argtypes = [ctypes.c_uint64]
fw.fw_copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int]
fw.fw_copy_async.argtypes = fw.fw_copy.argtypes
fw.fw_copy_2d.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_size_t,
                          ctypes.c_int]
fw.fw_copy_peer.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]
rt.fake_cuda_set_launch_ns.argtypes = [ctypes.c_uint64]

MiB = 1 << 20
KEEP = int(os.environ.get("KEEP_MIB", "96"))
H2H, H2D, D2H, D2D, DEFAULT = 0, 1, 2, 3, 4


def check(result):
    if result != 0:
        sys.exit(f"a CUDA call failed: {result}")


waits = {}


def reserve():
    keep = [fw.fw_alloc(KEEP * MiB) for _ in range(3)]  # @keep
    tmp = fw.fw_alloc(40 * MiB)  # @tmp
    check(fw.fw_free(tmp))
    kept_async = fw.fw_alloc_async(24 * MiB)  # @async
    managed = fw.fw_alloc_managed(8 * MiB)  # @managed
    peak = fw.fw_alloc(160 * MiB)  # @peak
    check(fw.fw_free(peak))
    pinned = fw.fw_host_alloc(6 * MiB)  # @pinned
    pinned_tmp = fw.fw_host_alloc_flags(2 * MiB)  # @pinned_tmp
    check(fw.fw_free_host(pinned_tmp))
    assert all(keep) and kept_async and managed and pinned
    return keep, pinned


def copy(keep, pinned):
    host = ctypes.create_string_buffer(4 * MiB)
    src = ctypes.addressof(host)
    for _ in range(int(os.environ.get("H2D_STEPS", "5"))):
        check(fw.fw_copy(keep[0], src, 4 * MiB, H2D))  # @h2d
    for _ in range(3):
        check(fw.fw_copy_async(pinned, keep[1], 1 * MiB, D2H))  # @d2h
    check(fw.fw_copy(keep[2], keep[1], 2 * MiB, DEFAULT))  # @d2d
    check(fw.fw_copy_peer(keep[2], keep[0], 1 * MiB))  # @peer
    check(fw.fw_copy_2d(keep[1], src, 512, 256, H2D))  # @copy2d


def launch_and_wait():
    rt.fake_cuda_set_launch_ns(100_000)
    check(fw.fw_launch(2000))  # @launch
    t = time.perf_counter()
    check(fw.fw_stream_sync())  # @sync
    waits["sync"] = time.perf_counter() - t
    rt.fake_cuda_set_launch_ns(0)
    for _ in range(50):
        check(fw.fw_graph_launch())  # @graph
    rt.fake_cuda_set_launch_ns(300_000_000)
    check(fw.fw_launch(1))
    rt.fake_cuda_set_spin(1)
    t = time.perf_counter()
    check(fw.fw_device_sync())  # @spin
    waits["spin"] = time.perf_counter() - t
    rt.fake_cuda_set_spin(0)
    rt.fake_cuda_set_launch_ns(150_000_000)
    check(fw.fw_launch(1))
    t = time.perf_counter()
    check(fw.fw_event_sync())  # @event
    waits["event"] = time.perf_counter() - t


def pin_again_and_again():
    kept = []
    for _ in range(int(os.environ.get("PINNED_STEPS", "0"))):
        kept.append(fw.fw_host_alloc(4 * MiB))  # @pinned_grow
        block = fw.fw_host_alloc(4 * MiB)  # @pinned_reuse
        check(fw.fw_free_host(block))
    assert all(kept)
    return kept


def count_launches():
    rt.fake_cuda_set_launch_ns(0)
    check(fw.fw_launch(int(os.environ.get("MANY_LAUNCHES", "64000"))))  # @many


def pending_error(keep):
    rt.fake_cuda_fail_next(7)
    check(fw.fw_copy(keep[2], keep[1], 1 * MiB, DEFAULT))  # @unknown_direction
    print("last error", fw.fw_peek_error())


keep, pinned = reserve()
pinned_blocks = pin_again_and_again()
copy(keep, pinned)
launch_and_wait()
count_launches()
pending_error(keep)
if os.environ.get("WAIT_TIMES"):
    with open(os.environ["WAIT_TIMES"], "w") as f:
        json.dump(waits, f)
print("gpu calls done")
