"""Code generated at run time, the way a JIT compiler makes it: a counted loop written as
x86-64 machine code into an executable anonymous mapping, declared in this process's perf map
(`/tmp/perf-PID.map`, as CPython's `-X perf`, JAX and others write one) as `mlprof_test_spin`,
and called through ctypes. Known truth: the `@call` line's time is that function, native
(x86-64 only: elsewhere it says it skipped)."""
import ctypes
import mmap
import os
import platform
import sys

if platform.machine() not in ("x86_64", "AMD64"):
    print("skipped: not x86-64")
    sys.exit(0)

# mov rcx, rdi; 1: dec rcx; jnz 1b; ret
CODE = bytes([0x48, 0x89, 0xF9, 0x48, 0xFF, 0xC9, 0x75, 0xFB, 0xC3])
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(CODE)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
    f.write(f"{addr:x} {len(CODE):x} mlprof_test_spin\n")
spin = ctypes.CFUNCTYPE(None, ctypes.c_uint64)(addr)
for _ in range(8):
    spin(150_000_000)  # @call
print("spun", flush=True)
