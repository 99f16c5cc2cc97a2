"""Regions of the program's own marking, through the preload library's exported functions.

Under ``mlprof run`` the preload library is in the process, and ``ctypes.CDLL(None)`` (the
process's global symbol scope) finds ``mlprof_region_begin`` / ``mlprof_region_end`` /
``mlprof_active`` in it. Elsewhere the lookup fails once and every call is a no-op.
"""

import ctypes
import functools
import json
import os
import threading
import time

_lock = threading.Lock()
_lib = None
_looked = False
# The run's private directory, where the collector answers report requests: read once, so that
# a program (or a test) that changes its environment does not lose the answers.
_DIR = os.environ.get("MLPROF_DIR")


def _functions():
    global _lib, _looked
    if _looked:
        return _lib
    with _lock:
        if not _looked:
            try:
                scope = ctypes.CDLL(None)
                begin = scope.mlprof_region_begin
                end = scope.mlprof_region_end
                is_active = scope.mlprof_active
            except (OSError, AttributeError):
                _lib = None
            else:
                begin.restype = ctypes.c_uint64
                begin.argtypes = [
                    ctypes.c_char_p,
                    ctypes.c_size_t,
                    ctypes.POINTER(ctypes.c_int64),
                ]
                end.restype = ctypes.c_int
                end.argtypes = [
                    ctypes.c_uint64,
                    ctypes.c_int,
                    ctypes.POINTER(ctypes.c_int64),
                ]
                is_active.restype = ctypes.c_int
                is_active.argtypes = []
                _lib = (begin, end, is_active)
            _looked = True
    return _lib


def active():
    """True when this process runs under ``mlprof run`` (its preload library is loaded and
    connected to the collector)."""
    lib = _functions()
    return bool(lib and lib[2]())


class Region:
    """One open region. ``heap_start``: the process's exact heap (bytes) when it began; after
    ``end()``: ``peak`` (the highest heap inside it, above ``heap_start``) and ``net`` (heap at
    the end minus at the start), exact. All are ``None`` outside mlprof."""

    def __init__(self, name):
        self.name = str(name)
        self.id = 0
        self.heap_start = None
        self.peak = None
        self.net = None

    def begin(self):
        lib = _functions()
        if lib is None:
            return self
        raw = self.name.encode("utf-8", "replace")
        heap = ctypes.c_int64(0)
        self.id = lib[0](raw, len(raw), ctypes.byref(heap))
        if self.id:
            self.heap_start = heap.value
        return self

    def end(self, report=False):
        """Close the region. With ``report=True`` (or 1), also ask the collector for its
        summary (see :meth:`report`); with 2, also for its lines and its HTML page."""
        lib = _functions()
        if lib is None or not self.id:
            return self
        out = (ctypes.c_int64 * 2)()
        if lib[1](self.id, int(report), out) == 0:
            self.peak = max(0, out[0] - self.heap_start)
            self.net = out[1] - self.heap_start
        return self

    def report(self, timeout=10.0):
        """The collector's summary of the region (a dict, as in the profile's ``regions``), for
        a region ended with ``end(report=True)``; ``None`` if it does not come within
        ``timeout`` seconds (the collector answers within a tick, 20 ms, when not busy)."""
        directory = _DIR
        if not self.id or not directory:
            return None
        path = os.path.join(directory, "region-%d-%d.json" % (os.getpid(), self.id))
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(delay)
                if time.monotonic() >= deadline - timeout + 0.05:
                    delay = min(delay * 2, 0.02)  # a slow answer: look less often
                continue
            try:
                os.unlink(path)
            except OSError:
                pass
            try:
                return json.loads(data.decode("utf-8"))
            except ValueError:
                return None

    def __enter__(self):
        return self.begin()

    def __exit__(self, *exc):
        self.end()
        return False


class mark:
    """A named region of the program in the profile: ``with mlprof.mark("name"): ...`` or
    ``@mlprof.mark("name")`` on a function. The report lists each region with its duration,
    CPU split, the exact heap high inside it and the lines that held it."""

    def __init__(self, name):
        self.name = str(name)
        self._open = threading.local()

    def __enter__(self):
        stack = getattr(self._open, "stack", None)
        if stack is None:
            stack = self._open.stack = []
        region = Region(self.name).begin()
        stack.append(region)
        return region

    def __exit__(self, *exc):
        self._open.stack.pop().end()
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def marked(*args, **kwargs):
            with Region(self.name):
                return function(*args, **kwargs)

        return marked
