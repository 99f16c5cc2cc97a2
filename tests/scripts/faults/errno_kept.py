"""errno after successful calls is what libc left: a 200 MiB malloc and a 64 MiB memmove
(both always sampled) must not change it."""
import ctypes
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memmove.restype = ctypes.c_void_p
libc.memmove.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

for size in (200 << 20, 8 << 20, 1 << 30):
    ctypes.set_errno(0)
    p = libc.malloc(size)
    print("malloc", size >> 20, "MiB ok:", bool(p), "errno", ctypes.get_errno())
    libc.free(p)

src = ctypes.create_string_buffer(64 << 20)
dst = ctypes.create_string_buffer(64 << 20)
for _ in range(3):
    ctypes.set_errno(0)
    libc.memmove(dst, src, 64 << 20)
    print("memmove 64 MiB errno", ctypes.get_errno())
sys.exit(0)
