"""Print the offsets CPython 3.13 publishes about itself in ``_Py_DebugOffsets``.

Run it under the interpreter to inspect (``python3.13 debug_offsets.py``).
``_Py_DebugOffsets`` is the first member of ``_PyRuntimeState``, so it starts
at the ``_PyRuntime`` symbol.  This script reads it through ctypes and prints
the entries that mlprof's layout table also has, under the same names that
``derive.c`` prints (``tstate_frame=72`` ...), so the two can be compared
line by line; ``derive.sh`` does that comparison automatically for 3.13.
The ``dbg_<name>=`` lines are the ctypes offsets of the same members *inside*
``_Py_DebugOffsets``; they must equal derive.c's ``offsetof`` values.

Byte offsets of the members mlprof's run-time check reads, inside
``_Py_DebugOffsets`` (CPython 3.13.0 ``Include/internal/pycore_runtime.h``,
x86_64; every member after ``cookie`` is a uint64_t).  They are the
``debug_offsets_313`` constants in ``pyframes/src/layouts.rs``, except the
four thread-enumeration members marked ``*``, which this script and derive.sh
cross-check but ``debug_offsets_313`` does not have constants for yet:

    offset  member                                   value on 3.13.0
    ------  ---------------------------------------  ---------------
       0    cookie[8]  (b"xdebugpy")
       8    version    (PY_VERSION_HEX)              0x030d00f0
      16    free_threaded                            0 (GIL build)
      40    runtime_state.interpreters_head *        632
      72    interpreter_state.threads_head  *        7344
     168    thread_state.next               *        8
     184    thread_state.current_frame               72
     192    thread_state.thread_id          *        152
     200    thread_state.native_thread_id            160
     232    interpreter_frame.previous               8
     240    interpreter_frame.executable             0
     248    interpreter_frame.instr_ptr              56
     264    interpreter_frame.owner                  70
     280    code_object.filename                     112
     288    code_object.name                         120
     296    code_object.qualname                     128
     304    code_object.linetable                    136
     312    code_object.firstlineno                  68
     344    code_object.co_code_adaptive             200
     520    bytes_object.ob_size                     16
     528    bytes_object.ob_sval                     32
     544    unicode_object.state                     32
     552    unicode_object.length                    16
     560    unicode_object.asciiobject_size          40
     584    sizeof(_Py_DebugOffsets)

Not in ``_Py_DebugOffsets`` (so not checkable this way): ``_co_firsttraceable``,
the ``FRAME_OWNED_BY_CSTACK`` value, and the bit positions inside
``PyASCIIObject.state``.

The struct layout is only promised to be stable between patch releases of
3.13; 3.14 adds members (e.g. ``interpreter_state.threads_main``), which shifts
everything after them, so this script refuses other versions.
"""

import ctypes
import sys

COOKIE = b"xdebugpy"

u64 = ctypes.c_uint64


def _struct(name, *fields):
    return type(name, (ctypes.Structure,), {"_fields_": [(f, u64) for f in fields]})


RuntimeState = _struct("RuntimeState", "size", "finalizing", "interpreters_head")
InterpreterState = _struct(
    "InterpreterState", "size", "id", "next", "threads_head", "gc",
    "imports_modules", "sysdict", "builtins", "ceval_gil", "gil_runtime_state",
    "gil_runtime_state_enabled", "gil_runtime_state_locked",
    "gil_runtime_state_holder")
ThreadState = _struct(
    "ThreadState", "size", "prev", "next", "interp", "current_frame",
    "thread_id", "native_thread_id", "datastack_chunk", "status")
InterpreterFrame = _struct(
    "InterpreterFrame", "size", "previous", "executable", "instr_ptr",
    "localsplus", "owner")
CodeObject = _struct(
    "CodeObject", "size", "filename", "name", "qualname", "linetable",
    "firstlineno", "argcount", "localsplusnames", "localspluskinds",
    "co_code_adaptive")
PyObjectOffs = _struct("PyObjectOffs", "size", "ob_type")
TypeObject = _struct("TypeObject", "size", "tp_name", "tp_repr", "tp_flags")
TupleObject = _struct("TupleObject", "size", "ob_item", "ob_size")
ListObject = _struct("ListObject", "size", "ob_item", "ob_size")
DictObject = _struct("DictObject", "size", "ma_keys", "ma_values")
FloatObject = _struct("FloatObject", "size", "ob_fval")
LongObject = _struct("LongObject", "size", "lv_tag", "ob_digit")
BytesObject = _struct("BytesObject", "size", "ob_size", "ob_sval")
UnicodeObject = _struct("UnicodeObject", "size", "state", "length", "asciiobject_size")
Gc = _struct("Gc", "size", "collecting")


class DebugOffsets(ctypes.Structure):
    _fields_ = [
        ("cookie", ctypes.c_char * 8),
        ("version", u64),
        ("free_threaded", u64),
        ("runtime_state", RuntimeState),
        ("interpreter_state", InterpreterState),
        ("thread_state", ThreadState),
        ("interpreter_frame", InterpreterFrame),
        ("code_object", CodeObject),
        ("pyobject", PyObjectOffs),
        ("type_object", TypeObject),
        ("tuple_object", TupleObject),
        ("list_object", ListObject),
        ("dict_object", DictObject),
        ("float_object", FloatObject),
        ("long_object", LongObject),
        ("bytes_object", BytesObject),
        ("unicode_object", UnicodeObject),
        ("gc", Gc),
    ]


# derive.c / layouts.rs name -> (_Py_DebugOffsets sub-struct, member)
FIELDS = [
    ("tstate_frame", "thread_state", "current_frame"),
    ("tstate_native_thread_id", "thread_state", "native_thread_id"),
    ("tstate_next", "thread_state", "next"),
    ("tstate_thread_id", "thread_state", "thread_id"),
    ("runtime_interpreters_head", "runtime_state", "interpreters_head"),
    ("interp_threads_head", "interpreter_state", "threads_head"),
    ("frame_back", "interpreter_frame", "previous"),
    ("frame_code", "interpreter_frame", "executable"),
    ("frame_instr", "interpreter_frame", "instr_ptr"),
    ("frame_owner", "interpreter_frame", "owner"),
    ("code_filename", "code_object", "filename"),
    ("code_name", "code_object", "name"),
    ("code_qualname", "code_object", "qualname"),
    ("code_linetable", "code_object", "linetable"),
    ("code_firstlineno", "code_object", "firstlineno"),
    ("code_adaptive", "code_object", "co_code_adaptive"),
    ("bytes_size", "bytes_object", "ob_size"),
    ("bytes_data", "bytes_object", "ob_sval"),
    ("ascii_object_size", "unicode_object", "asciiobject_size"),
    ("unicode_length", "unicode_object", "length"),
    ("unicode_state", "unicode_object", "state"),
]


def main():
    if sys.version_info[:2] != (3, 13):
        sys.exit("debug_offsets.py: needs CPython 3.13 (the _Py_DebugOffsets "
                 "layout differs between minor versions), got %s" % sys.version.split()[0])
    # ctypes.pythonapi is dlopen(NULL): the executable plus libpython, so this
    # works for --enable-shared and for static (export-dynamic) builds.
    addr = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    dbg = DebugOffsets.from_address(addr)
    if bytes(dbg.cookie) != COOKIE:
        sys.exit("debug_offsets.py: bad cookie %r at _PyRuntime" % bytes(dbg.cookie))
    print("# _PyRuntime=%#x" % addr)
    print("# cookie=%s version=%#x free_threaded=%d" % (
        bytes(dbg.cookie).decode(), dbg.version, dbg.free_threaded))
    if dbg.version >> 16 != 0x030D:
        sys.exit("debug_offsets.py: _Py_DebugOffsets.version %#x is not 3.13" % dbg.version)
    for name, sub, member in FIELDS:
        print("%s=%d" % (name, getattr(getattr(dbg, sub), member)))
    print("dbg_cookie=%d" % DebugOffsets.cookie.offset)
    print("dbg_version=%d" % DebugOffsets.version.offset)
    print("dbg_free_threaded=%d" % DebugOffsets.free_threaded.offset)
    for name, sub, member in FIELDS:
        off = getattr(DebugOffsets, sub).offset + getattr(type(getattr(dbg, sub)), member).offset
        print("dbg_%s=%d" % (name, off))
    print("dbg_sizeof=%d" % ctypes.sizeof(DebugOffsets))


if __name__ == "__main__":
    main()
