"""A program run under a seccomp filter that refuses process_vm_readv (as some container
runtimes' profiles do): the filter is installed here, then the interpreter is exec'd under it
with a CPU loop. Known truth: it prints the same and exits 0 with or without mlprof; mlprof
cannot read its Python frames and its report must say why (not just show no Python lines)."""
import ctypes
import errno
import os
import platform
import sys

NR = {"x86_64": 310, "aarch64": 270}[platform.machine()]


class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]


if len(sys.argv) == 1:
    insns = (Filter * 4)(
        Filter(0x20, 0, 0, 0),  # load the system call number
        Filter(0x15, 0, 1, NR),  # process_vm_readv?
        Filter(0x06, 0, 0, 0x00050000 | errno.EPERM),  # refuse it: EPERM
        Filter(0x06, 0, 0, 0x7FFF0000),  # allow everything else
    )
    prog = Program(4, insns)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0, ctypes.get_errno()  # seccomp filter
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, __file__, "under-filter"])


def spin():
    return sum(i * i for i in range(3_000_000))  # @spin


print("spun", spin() > 0)
