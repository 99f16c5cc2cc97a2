"""A fork child whose native names must survive its end while the collector lags behind.

The child spends 0.5 s of CPU in libc's `memset` (called through ctypes: native time, named
`libc.so.6`). Then it stops mlprof (its grandparent: the collector lagging, as on a machine
busier than its cores), runs code made at run time (an anonymous executable mapping, outside
every mapped file) and dies by SIGKILL, so it sends no exit record. Its parent leaves it
unreaped, a zombie, and only then lets mlprof go on. The collector then reads samples outside
its maps of a process that is gone: reading the maps again finds them empty. Known truth: the
`@memset` line's time is libc's, and the report still names it so."""
import ctypes
import mmap
import os
import platform
import signal
import sys
import time

if platform.machine() not in ("x86_64", "AMD64"):
    print("skipped: not x86-64")
    sys.exit(0)

# mov rcx, rdi; 1: dec rcx; jnz 1b; ret
CODE = bytes([0x48, 0x89, 0xF9, 0x48, 0xFF, 0xC9, 0x75, 0xFB, 0xC3])
mlprof = os.getppid()
child = os.fork()
if child == 0:
    buf = ctypes.create_string_buffer(64 << 20)
    deadline = time.thread_time() + 0.5
    while time.thread_time() < deadline:
        ctypes.memset(buf, 1, len(buf))  # @memset
    os.kill(mlprof, signal.SIGSTOP)
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(CODE)
    spin = ctypes.CFUNCTYPE(None, ctypes.c_uint64)(
        ctypes.addressof(ctypes.c_char.from_buffer(m))
    )
    for _ in range(3):
        spin(100_000_000)  # @spin
    os.kill(os.getpid(), signal.SIGKILL)
# The child is done within a second of CPU; a loaded machine may take longer: wait for its
# death without reaping it.
os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)
os.kill(mlprof, signal.SIGCONT)
time.sleep(1.0)
_, status = os.waitpid(child, 0)
print("child killed", os.WIFSIGNALED(status), flush=True)
