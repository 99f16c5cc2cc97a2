//! Asking PyTorch for its CUDA allocator's trace (docs/design/gpu-tensors.md), from inside the
//! interpreter and without a trace the program can see: no directory on `sys.path`, no
//! `sitecustomize`, no finder on `sys.meta_path`, no `PYTHONPATH` in its environment.
//!
//! At load time, in a Python process, the library registers a C audit hook
//! (`PySys_AddAuditHook`, which CPython documents as callable before `Py_Initialize`, and which
//! `-S`, `-I` and `-E` leave alone). The hook answers every audit event with "go on" (0) and
//! does nothing until an `import torch` event; from then on, at each event, it looks whether
//! `torch.cuda` has defined what the trace needs (`_lazy_call`, and `_record_memory_history`
//! in `torch.cuda.memory`): once it has, once per process, it compiles the tracing half
//! (`gpu_trace.py`, carried in this library) into a namespace of its own and calls its
//! `start(torch, run_dir)`, which queues the switching-on for PyTorch's CUDA initialisation.
//! A process that never imports `torch` pays one string comparison per audit event.
//!
//! Audit hooks are called with the calling thread attached to the interpreter (the GIL held on
//! builds that have one), so the C API may be called; every error the calls raise is cleared,
//! and the hook never fails an event. Not a libc hook nor a signal handler: it runs where the
//! interpreter itself allocates.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// The tracing half, NUL-terminated for `Py_CompileString`.
static SOURCE: &str = concat!(include_str!("gpu_trace.py"), "\0");
/// The file name its code carries: the collector never counts it as a line of the program.
const FILENAME: &CStr = mlprof_wire::TENSOR_HOOK_FILE;
/// `Py_file_input`: the start symbol for a module's source.
const PY_FILE_INPUT: c_int = 257;

/// Where the hook stands: waiting for `import torch`, looking for its CUDA module, done (the
/// trace was asked for, or never will be).
static STATE: AtomicU8 = AtomicU8::new(WAITING);
const WAITING: u8 = 0;
const LOOKING: u8 = 1;
const DONE: u8 = 2;

type Obj = *mut c_void;

/// The C API functions the hook calls, resolved at load time (all or none).
/// (`PyTuple_GetItem` and `PyUnicode_CompareWithASCIIString`, slots 0 and 1, are called
/// directly by [`waiting`], on every `import` event.)
struct Api {
    modules: unsafe extern "C" fn() -> Obj,
    dict_get: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    has_attr: unsafe extern "C" fn(Obj, *const c_char) -> c_int,
    compile: unsafe extern "C" fn(*const c_char, *const c_char, c_int) -> Obj,
    dict_new: unsafe extern "C" fn() -> Obj,
    dict_set: unsafe extern "C" fn(Obj, *const c_char, Obj) -> c_int,
    builtins: unsafe extern "C" fn() -> Obj,
    eval: unsafe extern "C" fn(Obj, Obj, Obj) -> Obj,
    decode_fs: unsafe extern "C" fn(*const c_char) -> Obj,
    tuple_new: unsafe extern "C" fn(isize) -> Obj,
    tuple_set: unsafe extern "C" fn(Obj, isize, Obj) -> c_int,
    call: unsafe extern "C" fn(Obj, Obj) -> Obj,
    incref: unsafe extern "C" fn(Obj),
    decref: unsafe extern "C" fn(Obj),
    clear: unsafe extern "C" fn(),
}

/// The resolved [`Api`]'s addresses, in its field order (0: not resolved).
static API: [AtomicUsize; 17] = [const { AtomicUsize::new(0) }; 17];
const NAMES: [&CStr; 17] = [
    c"PyTuple_GetItem",
    c"PyUnicode_CompareWithASCIIString",
    c"PyImport_GetModuleDict",
    c"PyDict_GetItemString",
    c"PyObject_HasAttrString",
    c"Py_CompileString",
    c"PyDict_New",
    c"PyDict_SetItemString",
    c"PyEval_GetBuiltins",
    c"PyEval_EvalCode",
    c"PyUnicode_DecodeFSDefault",
    c"PyTuple_New",
    c"PyTuple_SetItem",
    c"PyObject_CallObject",
    c"Py_IncRef",
    c"Py_DecRef",
    c"PyErr_Clear",
];

type AuditHook = unsafe extern "C" fn(*const c_char, Obj, *mut c_void) -> c_int;

/// Register the hook (load time, single-threaded, before `main`, given the program's `argc`
/// and `argv`) where the run asks for tensors (`MLPROF_GPU_TENSORS=1`: `mlprof run` sets it
/// where an NVIDIA driver is present, unless `--no-gpu-tensors`), unless this process has no
/// CPython C API, or the interpreter will switch to a debug raw allocator at start-up
/// ([`debug_allocator_ahead`]).
pub fn init(argc: c_int, argv: *const *const c_char) {
    // SAFETY: getenv with a valid C string at load time, before any thread can change the
    // environment; the result is read at once.
    let on = unsafe { libc::getenv(mlprof_wire::ENV_GPU_TENSORS.as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    if on.is_null() || unsafe { CStr::from_ptr(on) }.to_bytes() != b"1" {
        return;
    }
    let add = symbol(c"PySys_AddAuditHook");
    // SAFETY: glibc's `argc` and `argv` for the program, as the loader passed them.
    if add == 0 || unsafe { debug_allocator_ahead(argc, argv) } {
        return;
    }
    for (slot, name) in API.iter().zip(NAMES) {
        let f = symbol(name);
        if f == 0 {
            return;
        }
        slot.store(f, Ordering::Relaxed);
    }
    // SAFETY: `PySys_AddAuditHook(Py_AuditHookFunction, void *)` has this C signature in every
    // CPython since 3.8 and is documented as safe to call before `Py_Initialize` (it allocates
    // its entry with the raw allocator, malloc before initialisation).
    let add: unsafe extern "C" fn(AuditHook, *mut c_void) -> c_int =
        unsafe { core::mem::transmute::<usize, _>(add) };
    // SAFETY: registering a plain `extern "C"` function that lives as long as the library.
    unsafe { add(on_event, core::ptr::null_mut()) };
}

/// Whether the interpreter will replace its raw allocator with a debug one when it starts
/// (`-X dev`, `PYTHONDEVMODE`, `PYTHONMALLOC=*debug`; the environment unless `-E`/`-I`): the
/// hook's entry, allocated now with the default one, would then be freed at finalisation by
/// the debug allocator, which takes it for a corrupted block and aborts the program. Read from
/// the command line's interpreter options, up to the script, `-c`, `-m` or `-`.
///
/// # Safety
/// `argv` holds `argc` pointers to NUL-terminated strings (or is null).
unsafe fn debug_allocator_ahead(argc: c_int, argv: *const *const c_char) -> bool {
    let mut dev = false;
    let mut ignore_env = false;
    let arg = |i: c_int| -> Option<&[u8]> {
        if argv.is_null() || i >= argc {
            return None;
        }
        // SAFETY: `i < argc`: an entry of `argv`, a NUL-terminated string or null.
        let p = unsafe { *argv.add(i as usize) };
        // SAFETY: a non-null entry is NUL-terminated (the caller's contract).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
    };
    let mut i = 1;
    'options: while let Some(a) = arg(i) {
        if a.len() < 2 || !a.starts_with(b"-") || a == b"--" {
            break;
        }
        if a.starts_with(b"--") {
            // `--check-hash-based-pycs MODE` takes a value; the others end the options
            // (`--help`, `--version`) or take none.
            i += if a == b"--check-hash-based-pycs" {
                2
            } else {
                1
            };
            continue;
        }
        for (j, &c) in a.iter().enumerate().skip(1) {
            match c {
                b'c' | b'm' => break 'options,
                b'E' => ignore_env = true,
                b'I' => ignore_env = true,
                b'W' | b'X' => {
                    let value = if j + 1 < a.len() {
                        a.get(j + 1..)
                    } else {
                        i += 1;
                        arg(i)
                    };
                    if c == b'X' && value == Some(b"dev".as_slice()) {
                        dev = true;
                    }
                    break;
                }
                _ => {}
            }
        }
        i += 1;
    }
    if !ignore_env {
        let get = |name: &CStr| {
            // SAFETY: getenv with a valid C string at load time; read at once.
            let v = unsafe { libc::getenv(name.as_ptr()) };
            // SAFETY: a non-null getenv result is NUL-terminated.
            (!v.is_null()).then(|| unsafe { CStr::from_ptr(v) }.to_bytes())
        };
        if let Some(malloc) = get(c"PYTHONMALLOC").filter(|v| !v.is_empty()) {
            return malloc.ends_with(b"debug");
        }
        dev |= get(c"PYTHONDEVMODE").is_some_and(|v| !v.is_empty());
    }
    dev
}

fn symbol(name: &CStr) -> usize {
    // SAFETY: dlsym with a valid C string, outside any signal handler.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// The function resolved into `API[i]`, as the type `F` it has.
///
/// # Safety
/// `F` is the C function pointer type of the function named `NAMES[i]`, and `init` resolved
/// it (it registers the hook only after every slot holds its dlsym result).
unsafe fn resolved<F: Copy>(i: usize) -> F {
    const { assert!(core::mem::size_of::<F>() == core::mem::size_of::<usize>()) };
    let address = API.get(i).map_or(0, |a| a.load(Ordering::Relaxed));
    // SAFETY: a function pointer is one address wide (checked above); the caller's contract
    // says what function `address` is and that it is not 0.
    unsafe { core::mem::transmute_copy::<usize, F>(&address) }
}

fn api() -> Api {
    // SAFETY: each field's type is the C signature, in every CPython 3.9–3.15 (GIL and
    // free-threaded builds alike), of the function named at its index in NAMES, which `init`
    // resolved before registering the hook that calls this.
    unsafe {
        Api {
            modules: resolved(2),
            dict_get: resolved(3),
            has_attr: resolved(4),
            compile: resolved(5),
            dict_new: resolved(6),
            dict_set: resolved(7),
            builtins: resolved(8),
            eval: resolved(9),
            decode_fs: resolved(10),
            tuple_new: resolved(11),
            tuple_set: resolved(12),
            call: resolved(13),
            incref: resolved(14),
            decref: resolved(15),
            clear: resolved(16),
        }
    }
}

/// The audit hook: always 0 (the event goes on).
///
/// # Safety
/// Called by CPython with a NUL-terminated event name and its arguments' tuple, from a thread
/// attached to the interpreter.
unsafe extern "C" fn on_event(event: *const c_char, args: Obj, _data: *mut c_void) -> c_int {
    match STATE.load(Ordering::Acquire) {
        DONE => {}
        // SAFETY: the caller's contract, forwarded.
        WAITING => unsafe { waiting(event, args) },
        // SAFETY: the caller's contract: the thread is attached.
        _ => unsafe { looking() },
    }
    0
}

/// Whether this is `import torch`.
///
/// # Safety
/// As [`on_event`].
unsafe fn waiting(event: *const c_char, args: Obj) {
    // Every audit event of the process comes here (each `id()`, `sys._getframe()`): the name
    // is compared byte by byte, stopping at the first that differs, with no length taken.
    if event.is_null() {
        return;
    }
    for (i, &want) in b"import\0".iter().enumerate() {
        // SAFETY: NUL-terminated (the caller's contract); reading stops at the first byte
        // that differs from "import\0", so never past its NUL.
        if unsafe { *event.add(i) } as u8 != want {
            return;
        }
    }
    // SAFETY: the two functions of NAMES' indexes 0 and 1, resolved by `init` (`api`).
    let (tuple_get_item, compare_ascii): (
        unsafe extern "C" fn(Obj, isize) -> Obj,
        unsafe extern "C" fn(Obj, *const c_char) -> c_int,
    ) = unsafe { (resolved(0), resolved(1)) };
    // SAFETY: `args` is the event's tuple; a failed lookup returns NULL with an error set,
    // which is cleared. The item is borrowed.
    let name = unsafe { tuple_get_item(args, 0) };
    if name.is_null() {
        // SAFETY: the thread is attached; PyErr_Clear is NAMES' index 16, resolved by `init`.
        unsafe { resolved::<unsafe extern "C" fn()>(16)() };
        return;
    }
    // SAFETY: a live object (borrowed from the tuple); the comparison raises nothing.
    if unsafe { compare_ascii(name, c"torch".as_ptr()) } == 0 {
        let _ = STATE.compare_exchange(WAITING, LOOKING, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Whether `torch.cuda` has what the trace needs; if so, start it, once.
///
/// # Safety
/// The calling thread is attached to the interpreter.
unsafe fn looking() {
    let api = api();
    // SAFETY: the thread is attached; `sys.modules` and the items looked up in it are
    // borrowed, and `PyDict_GetItemString` raises nothing (it swallows lookup errors).
    let (torch, cuda, memory) = unsafe {
        let modules = (api.modules)();
        if modules.is_null() {
            return;
        }
        (
            (api.dict_get)(modules, c"torch".as_ptr()),
            (api.dict_get)(modules, c"torch.cuda".as_ptr()),
            (api.dict_get)(modules, c"torch.cuda.memory".as_ptr()),
        )
    };
    if torch.is_null() || cuda.is_null() || memory.is_null() {
        return;
    }
    // SAFETY: live modules (borrowed from `sys.modules`); `hasattr` clears its own errors.
    let ready = unsafe {
        (api.has_attr)(cuda, c"_lazy_call".as_ptr()) == 1
            && (api.has_attr)(memory, c"_record_memory_history".as_ptr()) == 1
    };
    if !ready {
        return;
    }
    if STATE
        .compare_exchange(LOOKING, DONE, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return; // another thread starts it
    }
    // SAFETY: the thread is attached; `torch` is a live module.
    unsafe { start(&api, torch) };
    // SAFETY: the thread is attached: nothing the start raised reaches the program.
    unsafe { (api.clear)() };
}

/// Run the tracing half's source in a namespace of its own and call its `start`.
///
/// # Safety
/// The calling thread is attached; `torch` is a live object.
unsafe fn start(api: &Api, torch: Obj) {
    // SAFETY: getenv with a valid C string; the value is copied into a Python string at once.
    let dir = unsafe { libc::getenv(mlprof_wire::ENV_DIR.as_ptr()) };
    if dir.is_null() {
        return;
    }
    // SAFETY: C API calls with an attached thread, each result checked for NULL; every new
    // reference is released once (`Py_DecRef` accepts NULL), the one `PyTuple_SetItem`
    // steals included (`torch` gains a reference first).
    unsafe {
        let code = (api.compile)(SOURCE.as_ptr().cast(), FILENAME.as_ptr(), PY_FILE_INPUT);
        let globals = (api.dict_new)();
        let run_dir = (api.decode_fs)(dir);
        let args = (api.tuple_new)(2);
        let builtins = (api.builtins)();
        let ready = !code.is_null()
            && !globals.is_null()
            && !run_dir.is_null()
            && !args.is_null()
            && !builtins.is_null()
            && (api.dict_set)(globals, c"__builtins__".as_ptr(), builtins) == 0;
        if ready {
            let done = (api.eval)(code, globals, globals);
            (api.decref)(done);
            let start = (api.dict_get)(globals, c"start".as_ptr());
            if !done.is_null() && !start.is_null() {
                (api.incref)(torch);
                (api.tuple_set)(args, 0, torch);
                (api.incref)(run_dir);
                (api.tuple_set)(args, 1, run_dir);
                let r = (api.call)(start, args);
                (api.decref)(r);
            }
        }
        (api.decref)(args);
        (api.decref)(run_dir);
        (api.decref)(globals);
        (api.decref)(code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ahead(args: &[&CStr]) -> bool {
        let argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        // SAFETY: `argv` holds `args.len()` NUL-terminated strings.
        unsafe { debug_allocator_ahead(argv.len() as c_int, argv.as_ptr()) }
    }

    #[test]
    fn dev_mode_on_the_command_line_is_seen_up_to_what_runs() {
        assert!(ahead(&[c"python", c"-X", c"dev", c"x.py"]));
        assert!(ahead(&[c"python", c"-Xdev", c"-m", c"pytest"]));
        assert!(ahead(&[c"python", c"-OW", c"error", c"-X", c"dev"]));
        assert!(!ahead(&[c"python", c"-X", c"utf8", c"x.py"]));
        assert!(!ahead(&[c"python", c"x.py", c"-X", c"dev"]));
        assert!(!ahead(&[c"python", c"-c", c"-X", c"dev"]));
        assert!(!ahead(&[c"python", c"-m", c"dev", c"-X", c"dev"]));
        assert!(!ahead(&[c"python", c"-W", c"dev", c"x.py"]));
        assert!(!ahead(&[c"python"]));
    }
}
