"""The fake CUDA device and its caching allocator (see ../../README.md)."""
import os
import sys
import threading

_initialized = False
_initialization_lock = threading.Lock()
# As PyTorch's: (callable, the caller's stack as lines), run at initialisation.
_queued_calls = []
_ROUND = 512
_SEGMENT = 2 << 20


class OutOfMemoryError(RuntimeError):
    pass


def _lazy_call(callable, **kwargs):
    if _initialized:
        callable()
    else:
        import traceback

        _queued_calls.append((callable, traceback.format_stack()))


def is_initialized():
    return _initialized


def init():
    global _initialized
    if _initialized:
        return
    _initialized = True
    for f, _ in _queued_calls:
        f()
    del _queued_calls[:]


# As PyTorch's `torch/cuda/__init__.py`: its memory and random-state modules are imported after
# the initialisation functions, the one after the other.
from . import memory  # noqa: E402
from . import random  # noqa: E402,F401


class _Allocator:
    def __init__(self):
        self.capacity = int(os.environ.get("FAKE_CUDA_CAPACITY", 1 << 30))
        self.segments = []  # [address, size, {block address: [size, state, frames]}]
        self.cached = {}  # size -> [addresses]
        self.allocated = 0
        self.max_allocated = 0
        self.requested = 0
        self.max_requested = 0
        self.reserved = 0
        self.next_address = 0x7F0000000000

    def allocate(self, nbytes, frames):
        size = max(_ROUND, -(-nbytes // _ROUND) * _ROUND)
        free = self.cached.get(size)
        if free:
            address = free.pop()
        else:
            seg_size = -(-size // _SEGMENT) * _SEGMENT
            if self.reserved + seg_size > self.capacity:
                memory._trace(0, "oom", 0, size, frames, device_free=self.capacity - self.reserved)
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % size)
            address = self.next_address
            self.next_address += seg_size
            self.reserved += seg_size
            self.segments.append([address, seg_size, {}])
            memory._trace(0, "segment_alloc", address, seg_size, frames)
            if seg_size > size:
                self.cached.setdefault(seg_size - size, []).append(address + size)
        for seg in self.segments:
            if seg[0] <= address < seg[0] + seg[1]:
                seg[2][address] = [size, "active_allocated", frames, nbytes]
        self.allocated += size
        self.max_allocated = max(self.max_allocated, self.allocated)
        self.requested += nbytes
        self.max_requested = max(self.max_requested, self.requested)
        # As PyTorch's: the trace carries the bytes asked for, the stats count both.
        memory._trace(0, "alloc", address, nbytes, frames)
        return address, size, nbytes

    def free(self, address, size, nbytes):
        memory._trace(0, "free_requested", address, nbytes, None)
        memory._trace(0, "free_completed", address, nbytes, None)
        for seg in self.segments:
            seg[2].pop(address, None)
        self.allocated -= size
        self.requested -= nbytes
        self.cached.setdefault(size, []).append(address)


_allocator = None


class Tensor:
    def __init__(self, address, size, nbytes):
        self.address, self.size, self.nbytes = address, size, nbytes

    def __del__(self):
        _allocator.free(self.address, self.size, self.nbytes)


def _frames():
    """The Python stack of the caller of `torch.empty`, innermost first (the allocator records
    the interpreter's frames; a builtin such as torch.empty has none of its own)."""
    out = []
    f = sys._getframe(3)  # past _frames, _allocate and torch.empty
    while f is not None:
        out.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return out


def _allocate(nbytes, frames=None):
    global _allocator
    init()
    if _allocator is None:
        _allocator = _Allocator()
    return Tensor(*_allocator.allocate(nbytes, _frames() if frames is None else frames))


def max_memory_allocated(device=None):
    return _allocator.max_allocated if _allocator else 0


def memory_allocated(device=None):
    return _allocator.allocated if _allocator else 0


def memory_reserved(device=None):
    return _allocator.reserved if _allocator else 0


def memory_stats(device=None):
    a = _allocator
    return {"requested_bytes.all.peak": a.max_requested if a else 0,
            "allocated_bytes.all.peak": a.max_allocated if a else 0}
