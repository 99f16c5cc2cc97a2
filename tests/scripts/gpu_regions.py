"""Two regions (mlprof.mark) making different CUDA calls from the very same stacks, known by
construction, through a framework library linked against a CUDA runtime (tests/fake-cuda:
without a GPU, the fake runtime).

One loop runs three phases through the same lines, called from the same places (so the
collector folds their copies and launches into the same rows unless regions part them):
- before any region: @alloc reserves 16 MiB and keeps it, @h2d copies 7 x 1 MiB host to device;
- region "load": @alloc reserves 64 MiB and keeps it, @h2d copies 3 x 1 MiB, @launch launches
  10 kernels;
- region "step": @alloc reserves 32 MiB and @free gives it back inside the region, @h2d copies
  5 x 1 MiB, @d2h copies 2 x 1 MiB device to host, @launch launches 20 kernels.

argv: FRAMEWORK_LIBRARY
"""
import contextlib
import ctypes
import sys

import mlprof

fw = ctypes.CDLL(sys.argv[1])
fw.fw_alloc.restype = ctypes.c_uint64
fw.fw_alloc.argtypes = [ctypes.c_size_t]
fw.fw_free.argtypes = [ctypes.c_uint64]
fw.fw_copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int]

MiB = 1 << 20
H2D, D2H = 1, 2
host = ctypes.create_string_buffer(MiB)
SRC = ctypes.addressof(host)

# (region, MiB reserved, given back, host-to-device copies, device-to-host copies, launches)
PHASES = [
    (None, 16, False, 7, 0, 0),
    ("load", 64, False, 3, 0, 10),
    ("step", 32, True, 5, 2, 20),
]


def phase(mib, give_back, h2d, d2h, launches):
    block = fw.fw_alloc(mib * MiB)  # @alloc
    assert block
    for _ in range(h2d):
        assert fw.fw_copy(block, SRC, MiB, H2D) == 0  # @h2d
    for _ in range(d2h):
        assert fw.fw_copy(SRC, block, MiB, D2H) == 0  # @d2h
    if launches:
        assert fw.fw_launch(launches) == 0  # @launch
    if give_back:
        assert fw.fw_free(block) == 0  # @free


for name, *figures in PHASES:
    with mlprof.mark(name) if name else contextlib.nullcontext():
        phase(*figures)
print("regions done")
