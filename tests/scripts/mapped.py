"""Anonymous mappings made outside malloc, with known sizes. argv[1] picks the scenario.
Lines are found by their `# @marker` comments. Sizes in MiB (2**20 bytes)."""
import ctypes
import mmap
import os
import sys

MiB = 2**20
RW = mmap.PROT_READ | mmap.PROT_WRITE
ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
MREMAP_MAYMOVE = 1

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mmap64.restype = ctypes.c_void_p
libc.mmap64.argtypes = libc.mmap.argtypes
libc.mremap.restype = ctypes.c_void_p
libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_DONTNEED = 4


def touch(addr, size):
    """Write one byte per page, as a program using the memory would."""
    ctypes.memset(addr, 1, size)


scenario = sys.argv[1]

if scenario == "lines":
    # Truth: at the mappings' peak, 60 MiB (Python's mmap module, a shared anonymous map),
    # 45 MiB (mmap) and 63 MiB (10 MiB grown by mremap) are mapped at their lines: 168 MiB.
    # The 50 MiB map was closed and the 30 MiB one unmapped before: they hold nothing then.
    # The heap is not changed by any of it.
    x = mmap.mmap(-1, 50 * MiB)  # @closed
    x.close()
    gone = libc.mmap(None, 30 * MiB, RW, ANON, -1, 0)  # @unmapped
    libc.munmap(gone, 30 * MiB)
    y = mmap.mmap(-1, 60 * MiB)  # @python-mmap
    z = libc.mmap64(None, 45 * MiB, RW, ANON, -1, 0)  # @mmap
    w = libc.mmap(None, 10 * MiB, RW, ANON, -1, 0)
    w = libc.mremap(w, 10 * MiB, 63 * MiB, MREMAP_MAYMOVE)  # @mremap
    # A reservation (PROT_NONE: no access) is not memory, and a failed call changes nothing.
    r = libc.mmap(None, 1024 * MiB, 0, ANON, -1, 0)  # @reservation
    bad = libc.mmap(None, 4096, RW, ANON, -1, 1)
    err = ctypes.get_errno()
    assert bad == ctypes.c_void_p(-1).value and err == 22, (bad, err)  # EINVAL, as without us
    touch(z, 45 * MiB)
    touch(w, 63 * MiB)
    print("mapped", flush=True)
elif scenario == "fork":
    # Truth: the parent maps 60 MiB, then forks; the child maps 40 MiB of its own. The child's
    # own peak is 40 MiB (the parent's map is inherited, the parent's to count).
    y = libc.mmap(None, 60 * MiB, RW, ANON, -1, 0)  # @parent-map
    pid = os.fork()
    if pid == 0:
        c = libc.mmap(None, 40 * MiB, RW, ANON, -1, 0)  # @child-map
        touch(c, 40 * MiB)
        libc.munmap(y, 60 * MiB)  # the inherited one, gone in the child only
        os._exit(0)
    os.waitpid(pid, 0)
    print("forked", flush=True)
elif scenario == "cut":
    # Truth: @cut-map maps 64 MiB and fills it; @cut-unmap unmaps its first 16 MiB and
    # @cut-advise gives its last 16 MiB back (MADV_DONTNEED, as an allocator purges), so 32 MiB
    # of it stays mapped: held by @cut-map, nothing by the lines that cut it. Then @held maps
    # and fills 96 MiB. At the end 128 MiB are mapped and resident, a few MiB of heap: what
    # mlprof counts at its peak is mostly mapped, and the lines hold it.
    import time

    a = libc.mmap(None, 64 * MiB, RW, ANON, -1, 0)  # @cut-map
    touch(a, 64 * MiB)
    assert libc.munmap(a, 16 * MiB) == 0  # @cut-unmap
    assert libc.madvise(a + 48 * MiB, 16 * MiB, MADV_DONTNEED) == 0  # @cut-advise
    b = libc.mmap(None, 96 * MiB, RW, ANON, -1, 0)  # @held
    touch(b, 96 * MiB)
    time.sleep(0.5)  # collector ticks see it all
    print("cut", flush=True)
elif scenario == "openblas":
    # numpy with OpenBLAS's threads: OpenBLAS maps work buffers it touches only in part. They
    # are mapped, not heap: the heap peak stays below the RSS peak.
    import numpy as np

    a = np.random.rand(1200, 1200)
    for _ in range(3):
        b = a @ a
    print(float(b[0, 0]) > 0, flush=True)
