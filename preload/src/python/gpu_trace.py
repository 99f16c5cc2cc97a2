"""The tracing half of the preload library's PyTorch hook (preload/src/python/tensors.rs,
docs/design/gpu-tensors.md): carried inside the library and run, in a namespace of its own,
only in a process that imports `torch`, so that a Python process that never does pays for none
of it. Switches PyTorch's CUDA allocator trace on when PyTorch initialises CUDA, and at exit
writes it, reduced, to `gpu-tensors-PID.json` in the run's directory. Standard library only,
and only modules PyTorch has imported already. Nothing here raises into the program.
"""

import os as _os

# Allocator events kept (a ring: the oldest are overwritten): MLPROF_GPU_TRACE_ENTRIES.
_ENTRIES = 50_000
# Frames kept per stack, innermost first.
_FRAMES = 48
# Trace actions the collector replays, and their codes in the file.
# (Expandable segments map and unmap pages of a segment rather than allocating new ones.) Sizes
# in `alloc` and `free_completed` are what the tensor asked for (the block's `requested_size`):
# the bytes `requested_bytes` counts, which PyTorch decreases at `free_completed`.
_ACTIONS = {"alloc": 0, "free_completed": 1, "segment_alloc": 2, "segment_free": 3, "oom": 4,
            "segment_map": 2, "segment_unmap": 3}
# Blocks held by a tensor at the end (older PyTorch documents the second as `awaiting`).
_LIVE = ("active_allocated", "active_pending_free", "active_awaiting_free")


def _time_ns():
    import time

    return time.time_ns()


def _monotonic_ns():
    import time

    return time.monotonic_ns()


def _write(run_dir, pid, data):
    import json

    path = _os.path.join(run_dir, "gpu-tensors-%d.json" % pid)
    tmp = path + ".tmp"
    try:
        _os.unlink(tmp)
    except OSError:
        pass
    flags = _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL
    flags |= getattr(_os, "O_NOFOLLOW", 0) | getattr(_os, "O_CLOEXEC", 0)
    fd = _os.open(tmp, flags, 0o600)
    with _os.fdopen(fd, "w") as out:
        json.dump(data, out, separators=(",", ":"))
    _os.replace(tmp, path)


def _reduce(torch, snapshot, pid, entries):
    """The snapshot as the collector reads it: stacks and frames interned, events as arrays."""
    frames, stacks = {}, {}

    def stack(fs):
        ids = []
        for f in (fs or ())[:_FRAMES]:
            key = (str(f.get("filename", "")), int(f.get("line", 0) or 0), str(f.get("name", "")))
            ids.append(frames.setdefault(key, len(frames)))
        return stacks.setdefault(tuple(ids), len(stacks))

    devices = {}

    def device(d):
        return devices.setdefault(d, {"device": d, "events": [], "live": [], "reserved": 0})

    for d, trace in enumerate(snapshot.get("device_traces") or ()):
        if not trace:
            continue
        dev = device(d)
        dev["ring"] = len(trace)  # every action counts against the ring's `entries`
        events = dev["events"]
        for e in trace:
            code = _ACTIONS.get(e.get("action"))
            if code is None:
                continue
            where = e.get("device_free", 0) if code == 4 else e.get("addr", 0)
            # An allocation with no frame at all was made by a thread without Python (the
            # autograd engine's device thread): its empty stack, not "no stack known".
            frames_of = e.get("frames") if code in (0, 4) else None
            events.append([code, int(where or 0), int(e.get("size", 0) or 0),
                           stack(frames_of) if frames_of is not None else -1,
                           int(e.get("time_us", 0) or 0)])
    for seg in snapshot.get("segments") or ():
        dev = device(int(seg.get("device", 0) or 0))
        dev["reserved"] += int(seg.get("total_size", 0) or 0)
        for b in seg.get("blocks") or ():
            if b.get("state") in _LIVE:
                size = b.get("requested_size", b.get("size", 0))
                dev["live"].append([int(b.get("address", 0) or 0), int(size or 0),
                                    stack(b.get("frames"))])
    for d, dev in devices.items():
        try:
            dev["max_allocated"] = int(torch.cuda.max_memory_allocated(d))
        except Exception:
            dev["max_allocated"] = -1
        try:
            dev["max_requested"] = int(torch.cuda.memory_stats(d)["requested_bytes.all.peak"])
        except Exception:
            dev["max_requested"] = -1
    return {
        "version": 1,
        "pid": pid,
        "state": "done",
        # PyTorch stamps events in Unix microseconds; this pair maps them to the run's clock.
        "clock": [_time_ns(), _monotonic_ns()],
        "torch": str(getattr(torch, "__version__", "")),
        "entries": entries,
        "frames": [list(k) for k in frames],
        "stacks": [list(k) for k in stacks],
        "devices": sorted(devices.values(), key=lambda v: v["device"]),
    }


def _dump(torch, run_dir, pid, entries):
    if _os.getpid() != pid:
        return  # a fork child: its parent's trace, not its own
    try:
        data = _reduce(torch, torch.cuda.memory._snapshot(), pid, entries)
    except BaseException as e:  # noqa: B036: never into the program's exit
        data = {"version": 1, "pid": pid, "state": "failed",
                "why": "reading the trace failed: %s: %s" % (type(e).__name__, e)}
    try:
        _write(run_dir, pid, data)
    except Exception:
        pass


def start(torch, run_dir):
    """Called while `torch` is still being imported, as soon as `torch.cuda` has defined its
    initialisation functions and `torch.cuda.memory` has run: neither is an attribute of its
    package yet (a submodule is bound to its package once it has run), so both are taken from
    `sys.modules`. By the CUDA initialisation and the exit, `torch.cuda` is bound."""
    import sys

    try:
        cuda = sys.modules["torch.cuda"]
        record = sys.modules["torch.cuda.memory"]._record_memory_history
        lazy = cuda._lazy_call
        entries = int(_os.environ.get("MLPROF_GPU_TRACE_ENTRIES", _ENTRIES))
    except Exception:
        return  # a PyTorch without the trace: the collector keeps the segment view

    def switch_on():
        # PyTorch turns an exception here into the program's CUDA initialisation failing.
        try:
            _switch_on(torch, record, run_dir, entries)
        except Exception:
            pass

    try:
        # `_lazy_call` formats the caller's stack for its error message (linecache reading the
        # sources of the whole import: about 30 ms); queued directly, the call is the same and
        # its note names us.
        # Started from an audit event, possibly one PyTorch's own CUDA initialisation raised
        # while it holds the lock (`os.environ` set under it): the lock is taken only if free.
        # Held, the initialisation is under way and drains the queue after this event.
        queue = getattr(cuda, "_queued_calls", None)
        lock = getattr(cuda, "_initialization_lock", None)
        if isinstance(queue, list) and lock is not None:
            note = ["  queued by mlprof's PyTorch hook\n"]
            if lock.acquire(blocking=False):
                try:  # as _lazy_call: never between another thread's check and its drain
                    queued = not cuda.is_initialized()
                    if queued:
                        queue.append((switch_on, note))
                finally:
                    lock.release()
                if not queued:
                    lazy(switch_on)
            else:
                queue.append((switch_on, note))
        else:
            lazy(switch_on)
    except Exception:
        pass


def _switch_on(torch, record, run_dir, entries):
    """At PyTorch's CUDA initialisation, in whichever process makes it (a fork child that
    initialises CUDA is traced as itself)."""
    pid = _os.getpid()
    try:
        record(enabled="all", context="alloc", stacks="python", max_entries=entries)
    except Exception as e:
        why = "PyTorch refused the trace: %s: %s" % (type(e).__name__, e)
        try:
            _write(run_dir, pid, {"version": 1, "pid": pid, "state": "failed", "why": why})
        except Exception:
            pass
        return
    try:
        _write(run_dir, pid, {"version": 1, "pid": pid, "state": "recording"})
    except Exception:
        return
    import atexit

    atexit.register(_dump, torch, run_dir, pid, entries)
