/*
 * derive.c - print the CPython struct offsets that mlprof's in-process frame
 * walker needs (pyframes/src/layouts.rs), computed with offsetof()
 * against one installed CPython's headers.
 *
 * Build once per Python (derive.sh does this):
 *   gcc -I<include/python3.X> -o derive derive.c
 * It is never linked against libpython and never run inside Python: it only
 * needs the headers.  Py_BUILD_CORE is defined so the internal headers
 * (internal/pycore_frame.h, internal/pycore_runtime.h, internal/pycore_interp.h)
 * can be included.
 *
 * Output: one `name=value` line per field; `none` where the field does not
 * exist in that version.  The names are the field names of `Layout` in
 * layouts.rs.  On 3.13+ it also prints `dbg_<name>=<offset>` lines: the byte
 * offset of the matching member INSIDE `_Py_DebugOffsets` (which sits at the
 * start of `_PyRuntime`), so the Rust side can read the interpreter's own
 * copy of each offset at run time and compare.
 *
 * Supported: CPython 3.9 - 3.13, x86_64, default (GIL) non-debug builds.
 */
#define Py_BUILD_CORE 1
#include <Python.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION < 9 || PY_MINOR_VERSION > 13
#error "derive.c knows CPython 3.9 - 3.13 only; extend it for a new version"
#endif
#if defined(Py_GIL_DISABLED)
#error "free-threaded (Py_GIL_DISABLED) builds are not supported"
#endif
#if defined(Py_DEBUG) || defined(Py_TRACE_REFS)
#error "debug (Py_DEBUG / Py_TRACE_REFS) builds are not supported"
#endif
#if !defined(__x86_64__)
#error "the layout table is for x86_64 Linux"
#endif

#if PY_MINOR_VERSION <= 10
#include <frameobject.h> /* struct _frame (PyFrameObject) */
#else
#include "internal/pycore_frame.h" /* _PyInterpreterFrame, enum _frameowner */
#endif
/* _PyRuntimeState (interpreters.head; 3.13+: _Py_DebugOffsets) and
 * PyInterpreterState (tstate_head / threads.head), all versions. */
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"

#define P(name, value) printf("%s=%zu\n", (name), (size_t)(value))
#define NONE(name) printf("%s=none\n", (name))

/* Bit position(s) of a bitfield member of PyASCIIObject.state: set the member
 * to all ones in a zeroed object and look at the raw 32-bit word. */
static unsigned int state_word(const PyASCIIObject *o)
{
    unsigned int raw;
    _Static_assert(sizeof(o->state) == sizeof(raw), "state is one 32-bit word");
    memcpy(&raw, &o->state, sizeof(raw));
    return raw;
}

int main(void)
{
    printf("version=%d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);

    /* ---- how the walker finds and reads frames ---- */
#if PY_MINOR_VERSION <= 10
    printf("frame_kind=Legacy\n");
    printf("instr_kind=%s\n", PY_MINOR_VERSION == 9 ? "LastiBytes" : "LastiCodeUnits");
#elif PY_MINOR_VERSION <= 12
    printf("frame_kind=Cframe\n");
    printf("instr_kind=PrevInstr\n");
#else
    printf("frame_kind=Direct\n");
    printf("instr_kind=InstrPtr\n");
#endif

    /* ---- PyThreadState ---- */
#if PY_MINOR_VERSION <= 10
    P("tstate_frame", offsetof(PyThreadState, frame));
    P("cframe_current_frame", 0);
    NONE("tstate_native_thread_id");
#elif PY_MINOR_VERSION <= 12
    P("tstate_frame", offsetof(PyThreadState, cframe));
    P("cframe_current_frame", offsetof(_PyCFrame, current_frame));
    P("tstate_native_thread_id", offsetof(PyThreadState, native_thread_id));
#else
    P("tstate_frame", offsetof(PyThreadState, current_frame));
    P("cframe_current_frame", 0);
    P("tstate_native_thread_id", offsetof(PyThreadState, native_thread_id));
#endif

    /* ---- thread enumeration: _PyRuntime -> interpreters -> thread states ---- */
    P("tstate_next", offsetof(PyThreadState, next));
    P("tstate_thread_id", offsetof(PyThreadState, thread_id));
    _Static_assert(sizeof(((PyThreadState *)0)->thread_id) == 8, "thread_id is an unsigned long");
    /* _PyRuntime is a global _PyRuntimeState; interpreters.head is the
     * newest interpreter (the main one when there are no subinterpreters). */
    P("runtime_interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_MINOR_VERSION <= 10
    P("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
#else
    /* 3.11 moved the list head into `struct pythreads threads` */
    P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
#endif

    /* ---- frame ---- */
#if PY_MINOR_VERSION <= 10
    P("frame_back", offsetof(PyFrameObject, f_back));
    P("frame_code", offsetof(PyFrameObject, f_code));
    P("frame_instr", offsetof(PyFrameObject, f_lasti));
    _Static_assert(sizeof(((PyFrameObject *)0)->f_lasti) == 4, "f_lasti is an int");
    NONE("frame_owner");
    NONE("frame_is_entry");
    NONE("owner_cstack");
    NONE("owner_generator");
#else
    P("frame_back", offsetof(_PyInterpreterFrame, previous));
#if PY_MINOR_VERSION <= 12
    P("frame_code", offsetof(_PyInterpreterFrame, f_code));
    P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
    P("frame_code", offsetof(_PyInterpreterFrame, f_executable));
    P("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
    P("frame_owner", offsetof(_PyInterpreterFrame, owner));
    _Static_assert(sizeof(((_PyInterpreterFrame *)0)->owner) == 1, "owner is a char");
#if PY_MINOR_VERSION == 11
    P("frame_is_entry", offsetof(_PyInterpreterFrame, is_entry));
    _Static_assert(sizeof(((_PyInterpreterFrame *)0)->is_entry) == 1, "is_entry is a bool");
    NONE("owner_cstack");
#else
    NONE("frame_is_entry");
    P("owner_cstack", FRAME_OWNED_BY_CSTACK);
#endif
    /* same value 3.11-3.13: module const OWNER_GENERATOR in layouts.rs */
    P("owner_generator", FRAME_OWNED_BY_GENERATOR);
#endif

    /* ---- PyCodeObject ---- */
    P("code_filename", offsetof(PyCodeObject, co_filename));
    P("code_name", offsetof(PyCodeObject, co_name));
#if PY_MINOR_VERSION >= 11
    P("code_qualname", offsetof(PyCodeObject, co_qualname));
#else
    NONE("code_qualname");
#endif
    /* module const CODE_UNIT_SIZE in layouts.rs (lasti / instr units) */
    P("code_unit_size", sizeof(_Py_CODEUNIT));
    P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    _Static_assert(sizeof(((PyCodeObject *)0)->co_firstlineno) == 4, "co_firstlineno is an int");
#if PY_MINOR_VERSION == 9
    P("code_linetable", offsetof(PyCodeObject, co_lnotab));
#else
    P("code_linetable", offsetof(PyCodeObject, co_linetable));
#endif
#if PY_MINOR_VERSION <= 10
    P("code_code", offsetof(PyCodeObject, co_code));
    NONE("code_adaptive");
    NONE("code_firsttraceable");
#else
    NONE("code_code");
    P("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
    P("code_firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
    _Static_assert(sizeof(((PyCodeObject *)0)->_co_firsttraceable) == 4, "int");
#endif

    /* ---- bytes / str ---- */
    P("bytes_size", offsetof(PyBytesObject, ob_base.ob_size));
    P("bytes_data", offsetof(PyBytesObject, ob_sval));
    P("ascii_object_size", sizeof(PyASCIIObject));
    P("unicode_length", offsetof(PyASCIIObject, length));
    P("unicode_state", offsetof(PyASCIIObject, state));
    {
        PyASCIIObject o;
        memset(&o, 0, sizeof o);
        o.state.compact = 1;
        P("unicode_state_compact_bit", __builtin_ctz(state_word(&o)));
        memset(&o, 0, sizeof o);
        o.state.ascii = 1;
        P("unicode_state_ascii_bit", __builtin_ctz(state_word(&o)));
        memset(&o, 0, sizeof o);
        o.state.kind = 7;
        P("unicode_state_kind_shift", __builtin_ctz(state_word(&o)));
        P("unicode_state_kind_bits", __builtin_popcount(state_word(&o)));
    }

#if PY_MINOR_VERSION >= 13
    /* ---- offsets of members INSIDE _Py_DebugOffsets (3.13+) ---- */
    P("dbg_cookie", offsetof(_Py_DebugOffsets, cookie));
    P("dbg_version", offsetof(_Py_DebugOffsets, version));
    P("dbg_free_threaded", offsetof(_Py_DebugOffsets, free_threaded));
    P("dbg_tstate_frame", offsetof(_Py_DebugOffsets, thread_state.current_frame));
    P("dbg_tstate_native_thread_id", offsetof(_Py_DebugOffsets, thread_state.native_thread_id));
    P("dbg_tstate_next", offsetof(_Py_DebugOffsets, thread_state.next));
    P("dbg_tstate_thread_id", offsetof(_Py_DebugOffsets, thread_state.thread_id));
    P("dbg_runtime_interpreters_head", offsetof(_Py_DebugOffsets, runtime_state.interpreters_head));
    P("dbg_interp_threads_head", offsetof(_Py_DebugOffsets, interpreter_state.threads_head));
    P("dbg_frame_back", offsetof(_Py_DebugOffsets, interpreter_frame.previous));
    P("dbg_frame_code", offsetof(_Py_DebugOffsets, interpreter_frame.executable));
    P("dbg_frame_instr", offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
    P("dbg_frame_owner", offsetof(_Py_DebugOffsets, interpreter_frame.owner));
    P("dbg_code_filename", offsetof(_Py_DebugOffsets, code_object.filename));
    P("dbg_code_name", offsetof(_Py_DebugOffsets, code_object.name));
    P("dbg_code_qualname", offsetof(_Py_DebugOffsets, code_object.qualname));
    P("dbg_code_linetable", offsetof(_Py_DebugOffsets, code_object.linetable));
    P("dbg_code_firstlineno", offsetof(_Py_DebugOffsets, code_object.firstlineno));
    P("dbg_code_adaptive", offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
    P("dbg_bytes_size", offsetof(_Py_DebugOffsets, bytes_object.ob_size));
    P("dbg_bytes_data", offsetof(_Py_DebugOffsets, bytes_object.ob_sval));
    P("dbg_ascii_object_size", offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size));
    P("dbg_unicode_length", offsetof(_Py_DebugOffsets, unicode_object.length));
    P("dbg_unicode_state", offsetof(_Py_DebugOffsets, unicode_object.state));
    P("dbg_sizeof", sizeof(_Py_DebugOffsets));
#endif
    return 0;
}
