/*
 * derive.c - print the CPython struct offsets that mlprof's frame walker needs
 * (pyframes/src/layouts.rs), computed with offsetof() against one CPython's
 * headers.
 *
 * Build once per interpreter (derive.sh does this):
 *   gcc -I<include/python3.X> -I<include> -o derive derive.c
 * (add -DPy_GIL_DISABLED=1 for the free-threaded layout from headers that are
 * shared by both builds, as Debian's are). It is never linked against
 * libpython and never run inside Python: it only needs the headers.
 * Py_BUILD_CORE is defined so the internal headers can be included.
 *
 * Output: one `name=value` line per field; `none` where the field does not
 * exist in that version. The names are the field names of `Layout` in
 * layouts.rs. On 3.13+ it also prints `dbg_<name>=<offset>` lines: the byte
 * offset of the matching member INSIDE `_Py_DebugOffsets` (which sits at the
 * start of `_PyRuntime`), from which the walker takes the value at run time;
 * `dbgsize_<struct>` lines are the positions of the struct sizes it publishes
 * (bounds for the offsets it reads there), and `mi_*` lines the mimalloc
 * metadata a free-threaded build's allocations are measured by.
 *
 * Supported: CPython 3.9 - 3.15 (3.13+ also free-threaded), x86_64, non-debug.
 */
#define Py_BUILD_CORE 1
#include <Python.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION < 9 || PY_MINOR_VERSION > 15
#error "derive.c knows CPython 3.9 - 3.15 only; extend it for a new version (docs/design/python-layouts.md)"
#endif
#if defined(Py_GIL_DISABLED) && PY_MINOR_VERSION < 13
#error "free-threaded builds exist from 3.13 on"
#endif
#if defined(Py_DEBUG) || defined(Py_TRACE_REFS)
#error "debug (Py_DEBUG / Py_TRACE_REFS) builds are not supported"
#endif
#if !defined(__x86_64__)
#error "the layout table is for x86_64 Linux"
#endif

#if PY_MINOR_VERSION <= 10
#include <frameobject.h> /* struct _frame (PyFrameObject) */
#elif PY_MINOR_VERSION <= 13
#include "internal/pycore_frame.h" /* _PyInterpreterFrame, enum _frameowner */
#else
#include "internal/pycore_interpframe_structs.h" /* _PyInterpreterFrame, owners */
#include "internal/pycore_stackref.h"            /* Py_TAG_BITS */
#endif
/* _PyRuntimeState (interpreters.head; 3.13+: _Py_DebugOffsets) and
 * PyInterpreterState (tstate_head / threads.head), all versions. */
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_MINOR_VERSION >= 14
#include "internal/pycore_debug_offsets.h"
#endif
#if defined(Py_GIL_DISABLED)
#include "internal/pycore_mimalloc.h"
#endif

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
#if defined(Py_GIL_DISABLED)
    P("free_threaded", 1);
#else
    P("free_threaded", 0);
#endif

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
#if PY_MINOR_VERSION <= 10
    printf("line_table=Lnotab%s\n", PY_MINOR_VERSION == 9 ? "39" : "310");
#else
    printf("line_table=Locations311\n");
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
#if PY_MINOR_VERSION >= 15
    /* 3.15: every frame chain ends in this sentinel frame inside the thread state */
    P("tstate_base_frame", offsetof(PyThreadState, base_frame));
#else
    NONE("tstate_base_frame");
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
    NONE("owner_shim");
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
    NONE("owner_shim");
#elif PY_MINOR_VERSION <= 13
    NONE("frame_is_entry");
    /* the entry frame a call from C pushes; the largest owner value */
    P("owner_shim", FRAME_OWNED_BY_CSTACK);
#else
    NONE("frame_is_entry");
    /* 3.14 inserts FRAME_OWNED_BY_INTERPRETER (3) before CSTACK (4, unused), 3.15 drops
     * CSTACK: owners from this value on are not Python frames (the entry frame a call
     * from C pushes, and 3.15's base frame) */
    P("owner_shim", FRAME_OWNED_BY_INTERPRETER);
#endif
    /* same value 3.11-3.15: module const OWNER_GENERATOR in layouts.rs */
    P("owner_generator", FRAME_OWNED_BY_GENERATOR);
#endif
#if PY_MINOR_VERSION >= 14 && defined(Py_GIL_DISABLED)
    P("frame_tlbc_index", offsetof(_PyInterpreterFrame, tlbc_index));
    _Static_assert(sizeof(((_PyInterpreterFrame *)0)->tlbc_index) == 4, "tlbc_index is an int32");
#else
    NONE("frame_tlbc_index");
#endif

    /* ---- objects ---- */
    P("object_type", offsetof(PyObject, ob_type));
#if PY_MINOR_VERSION >= 14
    /* f_executable is a _PyStackRef: the object with these low bits cleared */
    P("executable_tag_mask", Py_TAG_BITS);
#else
    P("executable_tag_mask", 0);
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
#if PY_MINOR_VERSION >= 14 && defined(Py_GIL_DISABLED)
    /* thread-local bytecode: entries[tlbc_index] is the copy the frame runs */
    P("code_tlbc", offsetof(PyCodeObject, co_tlbc));
    P("code_array_entries", offsetof(_PyCodeArray, entries));
#else
    NONE("code_tlbc");
    NONE("code_array_entries");
#endif

    /* ---- bytes / str ---- */
    P("bytes_size", offsetof(PyBytesObject, ob_base.ob_size));
    P("bytes_data", offsetof(PyBytesObject, ob_sval));
    P("ascii_object_size", sizeof(PyASCIIObject));
    P("compact_object_size", sizeof(PyCompactUnicodeObject));
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

#if defined(Py_GIL_DISABLED)
    /* ---- mimalloc (free-threaded builds): a block's size from its page ---- */
    P("mi_segment_shift", MI_SEGMENT_SHIFT);
    P("mi_slice_shift", MI_SEGMENT_SLICE_SHIFT);
    P("mi_segment_slices", offsetof(mi_segment_t, slices));
    P("mi_slices_per_segment", MI_SLICES_PER_SEGMENT + 1);
    P("mi_slice_size", sizeof(mi_slice_t));
    P("mi_page_slice_offset", offsetof(mi_page_t, slice_offset));
    _Static_assert(sizeof(((mi_page_t *)0)->slice_offset) == 4, "slice_offset is a uint32");
#if PY_MINOR_VERSION == 13
    P("mi_page_block_size", offsetof(mi_page_t, xblock_size));
    _Static_assert(sizeof(((mi_page_t *)0)->xblock_size) == 4, "xblock_size is a uint32");
    P("mi_block_size_bytes", 4);
#else
    P("mi_page_block_size", offsetof(mi_page_t, block_size));
    P("mi_block_size_bytes", sizeof(((mi_page_t *)0)->block_size));
#endif
#else
    NONE("mi_segment_shift");
#endif

#if PY_MINOR_VERSION >= 13
    /* ---- offsets of members INSIDE _Py_DebugOffsets (3.13+) ---- */
#define D(name, member) P("dbg_" name, offsetof(_Py_DebugOffsets, member))
    D("cookie", cookie);
    D("version", version);
    D("free_threaded", free_threaded);
    D("tstate_frame", thread_state.current_frame);
    D("tstate_native_thread_id", thread_state.native_thread_id);
    D("tstate_next", thread_state.next);
    D("tstate_thread_id", thread_state.thread_id);
#if PY_MINOR_VERSION >= 15
    D("tstate_base_frame", thread_state.base_frame);
#endif
    D("runtime_interpreters_head", runtime_state.interpreters_head);
    D("interp_threads_head", interpreter_state.threads_head);
    D("frame_back", interpreter_frame.previous);
    D("frame_code", interpreter_frame.executable);
    D("frame_instr", interpreter_frame.instr_ptr);
    D("frame_owner", interpreter_frame.owner);
#if PY_MINOR_VERSION >= 14
    D("frame_tlbc_index", interpreter_frame.tlbc_index);
    D("code_tlbc", code_object.co_tlbc);
#endif
    D("object_type", pyobject.ob_type);
    D("code_filename", code_object.filename);
    D("code_name", code_object.name);
    D("code_qualname", code_object.qualname);
    D("code_linetable", code_object.linetable);
    D("code_firstlineno", code_object.firstlineno);
    D("code_adaptive", code_object.co_code_adaptive);
    D("bytes_size", bytes_object.ob_size);
    D("bytes_data", bytes_object.ob_sval);
    D("ascii_object_size", unicode_object.asciiobject_size);
#if PY_MINOR_VERSION >= 15
    D("compact_object_size", unicode_object.compactunicodeobject_size);
#endif
    D("unicode_length", unicode_object.length);
    D("unicode_state", unicode_object.state);
#undef D
    /* the sizes it publishes: every offset read through it must lie inside its struct */
#define S(name, member) P("dbgsize_" name, offsetof(_Py_DebugOffsets, member))
    S("runtime", runtime_state.size);
    S("interp", interpreter_state.size);
    S("tstate", thread_state.size);
    S("frame", interpreter_frame.size);
    S("code", code_object.size);
    S("object", pyobject.size);
    S("bytes", bytes_object.size);
    S("unicode", unicode_object.size);
#undef S
    P("dbg_sizeof", sizeof(_Py_DebugOffsets));
#endif
    return 0;
}
