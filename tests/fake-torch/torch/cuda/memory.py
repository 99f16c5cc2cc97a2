"""The fake allocator's memory history, in PyTorch's snapshot format (see ../../README.md)."""
import os
import sys
import time

_recording = None  # (max_entries, record frames)
_ring = []
_next = 0


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           **kwargs):
    global _recording, _ring, _next
    if os.environ.get("FAKE_TORCH_REFUSE_HISTORY"):
        raise RuntimeError("recording memory history is not supported here")
    if enabled is None:
        _recording = None
        return
    if stacks not in ("python", "all") or context not in (None, "state", "alloc", "all"):
        raise ValueError("bad arguments")
    _recording = (int(max_entries), context in ("alloc", "all"))
    _ring, _next = [], 0


def _trace(device, action, addr, size, frames, **extra):
    global _next
    if _recording is None:
        return
    entry = {"action": action, "addr": addr, "size": size, "stream": 0,
             "frames": list(frames or ()) if _recording[1] and frames else [],
             "time_us": int(time.time() * 1e6)}
    entry.update(extra)
    if len(_ring) < _recording[0]:
        _ring.append(entry)
    else:
        _ring[_next] = entry
        _next = (_next + 1) % _recording[0]


def _snapshot(device=None, augment_with_fx_traces=False):
    from . import _allocator

    segments = []
    for address, size, blocks in (_allocator.segments if _allocator else ()):
        segments.append({
            "device": 0, "address": address, "total_size": size, "stream": 0,
            "segment_type": "large",
            "allocated_size": sum(b[0] for b in blocks.values()),
            "active_size": sum(b[0] for b in blocks.values()),
            "blocks": [{"address": a, "size": b[0], "requested_size": b[3], "state": b[1],
                        "frames": b[2]} for a, b in sorted(blocks.items())],
        })
    trace = _ring[_next:] + _ring[:_next]
    return {"segments": segments, "device_traces": [trace]}
