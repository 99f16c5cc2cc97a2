"""Print what a running CPython 3.13+ publishes about itself in ``_Py_DebugOffsets``.

Usage: ``python3.X debug_offsets.py DERIVED`` where DERIVED is derive.c's output for the same
interpreter. ``_Py_DebugOffsets`` is the first member of ``_PyRuntimeState``, so it starts at
the ``_PyRuntime`` symbol. For every ``dbg_<name>=<position>`` line of DERIVED (the
``offsetof`` of a member inside ``_Py_DebugOffsets``, from the headers), this script reads the
``uint64_t`` at that position of the live interpreter's copy and prints ``<name>=<value>``,
so derive.sh can compare it with derive.c's own ``offsetof`` of the field itself
(``tstate_frame=72`` ...). ``dbgsize_*`` lines (the sizes of the structs it describes) are
printed as ``size_<struct>=<value>`` for the record. A value of 0 for a member that exists only
in free-threaded builds (``frame_tlbc_index``, ``code_tlbc``) prints as ``none``, as derive.c
prints fields a build does not have.

The layout of ``_Py_DebugOffsets`` itself changes with every minor version (3.14 inserts
members in the middle, 3.15 again), which is why the positions come from the same version's
headers; the cookie, ``version`` and ``free_threaded`` are checked against the interpreter.
"""

import ctypes
import sys

COOKIE = b"xdebugpy"
# Members that exist in _Py_DebugOffsets of every build but are 0 where the build lacks the
# field (the GIL build has no thread-local bytecode).
ZERO_IS_NONE = {"frame_tlbc_index", "code_tlbc"}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: debug_offsets.py DERIVED")
    derived = {}
    with open(sys.argv[1]) as f:
        for line in f:
            name, sep, value = line.strip().partition("=")
            if sep:
                derived[name] = value
    if sys.version_info[:2] < (3, 13):
        sys.exit("debug_offsets.py: needs CPython 3.13 or later, got %s" % sys.version.split()[0])
    # ctypes.pythonapi is dlopen(NULL): the executable plus libpython, so this works for
    # --enable-shared and for static (export-dynamic) builds.
    addr = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))

    def u64(position):
        return ctypes.c_uint64.from_address(addr + int(position)).value

    cookie = ctypes.string_at(addr, 8)
    if cookie != COOKIE:
        sys.exit("debug_offsets.py: bad cookie %r at _PyRuntime" % cookie)
    version = u64(derived["dbg_version"])
    free_threaded = u64(derived["dbg_free_threaded"])
    print("# _PyRuntime=%#x cookie=%s version=%#x free_threaded=%d"
          % (addr, cookie.decode(), version, free_threaded))
    if version >> 16 != (sys.version_info[0] << 8 | sys.version_info[1]):
        sys.exit("debug_offsets.py: _Py_DebugOffsets.version %#x is not this interpreter's" % version)
    if free_threaded != int(derived["free_threaded"]):
        sys.exit("debug_offsets.py: free_threaded is %d, the headers say %s"
                 % (free_threaded, derived["free_threaded"]))
    for name, position in derived.items():
        if name in ("dbg_cookie", "dbg_version", "dbg_free_threaded", "dbg_sizeof"):
            continue
        if name.startswith("dbg_"):
            field = name[len("dbg_"):]
            value = u64(position)
            print("%s=%s" % (field, "none" if value == 0 and field in ZERO_IS_NONE else value))
        elif name.startswith("dbgsize_"):
            print("# size_%s=%d" % (name[len("dbgsize_"):], u64(position)))


if __name__ == "__main__":
    main()
