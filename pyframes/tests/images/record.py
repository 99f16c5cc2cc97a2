"""Record a memory image of a live CPython stack, for pyframes/tests/recorded_walk.rs.

Run under the interpreter to record, from the repository root:

    python3.X pyframes/tests/images/record.py > pyframes/tests/images/3.X.txt

It reads its own process's memory through /proc/self/mem (a read of an unmapped address fails
instead of crashing) and writes, as text: the addresses the walker starts from (`_PyRuntime`,
the thread state, `PyCode_Type`, `PyUnicode_Type`, `PyBytes_Type`); the bytes of
`_Py_DebugOffsets`, the thread state, every frame on the chain, each frame's code object and
the `str` and `bytes` objects it names; and, as the truth to compare with, what Python itself
says of each frame (`co_filename`, `co_qualname`, `co_firstlineno`, `f_lasti`), innermost
first. The stack is recorded from inside a function that `sorted` calls (an entry frame of a
call from C below it), inside a generator, inside a method, inside a class body.

The chain is followed with the offsets of this build's section of
pyframes/layouts-derivation/expected.txt (derived from the headers, and on 3.13+ checked against
the interpreter's own `_Py_DebugOffsets`); only which bytes to copy depends on them. The test
walks the copy with mlprof's own walker and compares with what Python said.
"""

import ctypes
import os
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "..", "..", "layouts-derivation", "expected.txt")


def section():
    build = "%d.%d%s" % (sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "",))
    out, on = {}, False
    with open(EXPECTED) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                on = line == "[%s]" % build
            elif on and "=" in line:
                k, v = line.split("=", 1)
                out[k] = None if v == "none" else (int(v) if v.isdigit() else v)
    if not out:
        sys.exit("record.py: no section [%s] in expected.txt" % build)
    return build, out


BUILD, L = section()
MEM = os.open("/proc/self/mem", os.O_RDONLY)
REGIONS = {}


def read(addr, n):
    try:
        return os.pread(MEM, n, addr)
    except OSError:
        return b""


def keep(addr, n):
    data = read(addr, n)
    if data:
        REGIONS[addr] = data
    return data


def word(addr):
    data = read(addr, 8)
    return int.from_bytes(data, "little") if len(data) == 8 else 0


def int32(addr):
    data = read(addr, 4)
    return int.from_bytes(data, "little", signed=True) if len(data) == 4 else 0


def symbol(name):
    return ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, name))


def keep_str(obj):
    """A str object: its header and its characters (up to 4 bytes each), and a NUL."""
    if obj:
        length = min(word(obj + L["unicode_length"]), 4096)
        keep(obj, L["compact_object_size"] + 4 * length + 4)


def keep_bytes(obj):
    """A bytes object: its header and its data."""
    if obj:
        keep(obj, L["bytes_data"] + min(word(obj + L["bytes_size"]), 4096) + 1)


def keep_code(code):
    end = (L["code_adaptive"] or 0) + 8 if L["code_adaptive"] else L["code_linetable"] + 16
    keep(code, max(end, L["code_linetable"] + 8, L["bytes_size"] + 8))
    for field in ("code_filename", "code_name", "code_qualname"):
        if L.get(field) is not None:
            keep_str(word(code + L[field]))
    keep_bytes(word(code + L["code_linetable"]))
    if L.get("code_code") is not None:
        keep(word(code + L["code_code"]), L["bytes_data"])
    if L.get("code_tlbc") is not None:
        array = word(code + L["code_tlbc"])
        keep(array, 8 + 8 * max(1, min(word(array), 64)))


def record(tstate):
    # The thread state first, with no Python call between (pread is C): its current frame is
    # this function's.
    REGIONS[tstate] = os.pread(MEM, 512, tstate)
    frame_size = 128
    if L["frame_kind"] == "Cframe":
        # 3.11/3.12: the current frame is in a `_PyCFrame` on the C stack; copied with no
        # Python call between either.
        cframe = int.from_bytes(REGIONS[tstate][L["tstate_frame"]:L["tstate_frame"] + 8], "little")
        REGIONS[cframe] = os.pread(MEM, 64, cframe)
        frame = word(cframe + L["cframe_current_frame"])
    else:
        frame = word(tstate + L["tstate_frame"])
    if L.get("tstate_base_frame") is not None:
        keep(word(tstate + L["tstate_base_frame"]), frame_size)
    seen = 0
    while frame and seen < 200:
        seen += 1
        keep(frame, frame_size)
        code = word(frame + L["frame_code"]) & ~(L["executable_tag_mask"] or 0)
        if code and word(code + L["object_type"]) == symbol("PyCode_Type"):
            keep_code(code)
        frame = word(frame + L["frame_back"])
    return truth(sys._getframe())


def truth(frame):
    out = []
    while frame is not None:
        code = frame.f_code
        out.append((code.co_filename, getattr(code, "co_qualname", code.co_name),
                    code.co_firstlineno, frame.f_lasti // 2))
        frame = frame.f_back
    return out


def snapshot(_item):
    # `sorted` calls its key once per item: the first call records.
    if not SNAP:
        get = ctypes.pythonapi.PyGILState_GetThisThreadState
        get.restype = ctypes.c_void_p
        tstate = get()
        SNAP.append((tstate, record(tstate)))
    return 0


SNAP = []


def generator():
    yield sorted([3, 1, 2], key=snapshot)


class Holder:
    def method(self):
        return next(generator())

    value = None


class Body:
    Holder().method()


def main():
    tstate, frames = SNAP[0]
    debug = L.get("dbg_sizeof")
    if debug:
        keep(symbol("_PyRuntime"), debug)
    print("build %s" % BUILD)
    print("version %s" % sys.version.split()[0])
    for name in ("_PyRuntime", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type"):
        print("symbol %s %#x" % (name, symbol(name)))
    print("tstate %#x" % tstate)
    for filename, qualname, first, lasti in frames:
        print("frame %d %d %s %s" % (first, lasti, qualname, os.path.basename(filename)))
    for addr in sorted(REGIONS):
        print("mem %#x %s" % (addr, REGIONS[addr].hex()))


main()
