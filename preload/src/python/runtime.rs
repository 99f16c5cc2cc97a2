//! The interpreter this process runs, found once at load time: its version's layout, the
//! functions the sampler calls (resolved now: no lazy binding inside a signal handler), the
//! address of `PyCode_Type`; refusal, with a reason, for builds we cannot walk safely.

use core::sync::atomic::{AtomicUsize, Ordering};

use mlprof_wire::python_status;

use mlprof_pyframes::layouts::{self, debug_offsets_313, Layout};
use mlprof_pyframes::{Interpreter, Memory};

use super::read::Direct;

/// What the walker needs, copied out of the atomics below.
#[derive(Clone, Copy)]
pub struct Runtime {
    /// Offsets for this version.
    pub layout: &'static Layout,
    /// `PyGILState_GetThisThreadState`.
    get_tstate: extern "C" fn() -> usize,
    /// `Py_IsInitialized`.
    is_initialized: extern "C" fn() -> libc::c_int,
    /// Address of `PyCode_Type`.
    pub code_type: usize,
}

impl Runtime {
    /// The interpreter as the shared walker sees it.
    pub fn interpreter(&self) -> Interpreter {
        Interpreter {
            layout: self.layout,
            code_type: self.code_type,
        }
    }

    /// This thread's Python thread state, or 0 (native thread, or interpreter not running).
    #[inline]
    pub fn this_thread_state(&self) -> usize {
        if (self.is_initialized)() == 0 {
            return 0;
        }
        (self.get_tstate)()
    }
}

static LAYOUT: AtomicUsize = AtomicUsize::new(usize::MAX);
static GET_TSTATE: AtomicUsize = AtomicUsize::new(0);
static IS_INITIALIZED: AtomicUsize = AtomicUsize::new(0);
static CODE_TYPE: AtomicUsize = AtomicUsize::new(0);
static RUNTIME: AtomicUsize = AtomicUsize::new(0);
static IS_FINALIZING: AtomicUsize = AtomicUsize::new(0);
static GIL_CHECK: AtomicUsize = AtomicUsize::new(0);

/// Call a C API function of type `int (void)` resolved into `slot`; `None` if it was not found.
fn call_int(slot: &AtomicUsize) -> Option<libc::c_int> {
    let f = slot.load(Ordering::Relaxed);
    if f == 0 {
        return None;
    }
    // SAFETY: `init` stores into these slots only dlsym results for CPython functions of type
    // `int (void)` that read interpreter or thread state and can be called with or without
    // the GIL: `PyGILState_Check`, `Py_IsInitialized`, `Py_IsFinalizing` / `_Py_IsFinalizing`.
    let f: extern "C" fn() -> libc::c_int = unsafe { core::mem::transmute::<usize, _>(f) };
    Some(f())
}

/// Whether the calling thread holds the GIL (`PyGILState_Check`); false if unknown. Not for
/// signal handlers: it reads thread-specific data with `pthread_getspecific`.
pub fn holds_gil() -> bool {
    call_int(&GIL_CHECK).is_some_and(|r| r != 0)
}

/// Whether the interpreter is initialised (`Py_IsInitialized`); false if unknown.
pub fn initialized() -> bool {
    call_int(&IS_INITIALIZED).is_some_and(|r| r != 0)
}

/// Whether the interpreter is shutting down (`Py_IsFinalizing`); false if unknown.
pub fn finalizing() -> bool {
    call_int(&IS_FINALIZING).is_some_and(|r| r != 0)
}

/// `(address of _PyRuntime, address of PyCode_Type)` when frames are walked, for the collector.
pub fn addresses() -> (usize, usize) {
    match get() {
        Some(rt) => (RUNTIME.load(Ordering::Relaxed), rt.code_type),
        None => (0, 0),
    }
}

/// The runtime, if Python frames can be walked in this process.
#[inline]
pub fn get() -> Option<Runtime> {
    let layout = *layouts::ALL.get(LAYOUT.load(Ordering::Acquire))?;
    let get_tstate = GET_TSTATE.load(Ordering::Relaxed);
    let is_initialized = IS_INITIALIZED.load(Ordering::Relaxed);
    // SAFETY: both were stored by `init` from dlsym results for functions with these exact C
    // signatures in every supported CPython, and are non-zero whenever LAYOUT is set.
    let (get_tstate, is_initialized) = unsafe {
        (
            core::mem::transmute::<usize, extern "C" fn() -> usize>(get_tstate),
            core::mem::transmute::<usize, extern "C" fn() -> libc::c_int>(is_initialized),
        )
    };
    Some(Runtime {
        layout,
        get_tstate,
        is_initialized,
        code_type: CODE_TYPE.load(Ordering::Relaxed),
    })
}

/// Find the interpreter (at load time, single-threaded). Returns a [`python_status`] value.
/// `version` is `Py_GetVersion()`'s text.
pub fn init(version: &[u8]) -> u32 {
    let Some((major, minor)) = parse_version(version) else {
        return python_status::NONE;
    };
    // Used by the allocator wrapper whether or not frames can be walked.
    GIL_CHECK.store(symbol(c"PyGILState_Check"), Ordering::Relaxed);
    IS_INITIALIZED.store(symbol(c"Py_IsInitialized"), Ordering::Relaxed);
    if contains(version, b"free-threading") {
        return python_status::FREE_THREADED;
    }
    if symbol(c"_Py_NegativeRefcount") != 0 || symbol(c"_Py_RefTotal") != 0 {
        return python_status::UNSUPPORTED_VERSION; // a debug build: object layouts differ
    }
    let Some(index) = layouts::ALL
        .iter()
        .position(|l| (l.major, l.minor) == (major, minor))
    else {
        return python_status::UNSUPPORTED_VERSION;
    };
    let get_tstate = symbol(c"PyGILState_GetThisThreadState");
    let is_initialized = symbol(c"Py_IsInitialized");
    let code_type = symbol(c"PyCode_Type");
    if get_tstate == 0 || is_initialized == 0 || code_type == 0 {
        return python_status::MISSING_SYMBOL;
    }
    if (major, minor) >= (3, 13) {
        if let Some(status) = check_debug_offsets(minor) {
            return status;
        }
    }
    RUNTIME.store(symbol(c"_PyRuntime"), Ordering::Relaxed);
    let finalizing = match symbol(c"Py_IsFinalizing") {
        0 => symbol(c"_Py_IsFinalizing"),
        f => f,
    };
    IS_FINALIZING.store(finalizing, Ordering::Relaxed);
    GET_TSTATE.store(get_tstate, Ordering::Relaxed);
    CODE_TYPE.store(code_type, Ordering::Relaxed);
    LAYOUT.store(index, Ordering::Release);
    python_status::WALKED
}

/// 3.13+: compare our table with the interpreter's own `_Py_DebugOffsets` (at `_PyRuntime`).
/// `None` if they agree.
fn check_debug_offsets(minor: u8) -> Option<u32> {
    let runtime = symbol(c"_PyRuntime");
    if runtime == 0 {
        return Some(python_status::MISSING_SYMBOL);
    }
    let mut cookie = [0u8; 8];
    Direct.bytes(runtime, &mut cookie)?;
    let version = Direct.word(runtime + debug_offsets_313::VERSION)? as u64;
    if &cookie != debug_offsets_313::COOKIE || version >> 16 != (0x0300 | minor as u64) {
        return Some(python_status::OFFSETS_MISMATCH);
    }
    if Direct.word(runtime + debug_offsets_313::FREE_THREADED)? != 0 {
        return Some(python_status::FREE_THREADED);
    }
    for check in debug_offsets_313::CHECKS.iter() {
        if Direct.word(runtime + check.dbg_offset).map(|v| v as u64) != Some(check.expected) {
            return Some(python_status::OFFSETS_MISMATCH);
        }
    }
    None
}

fn symbol(name: &core::ffi::CStr) -> usize {
    // SAFETY: dlsym with a valid C string, outside any signal handler.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

fn parse_version(text: &[u8]) -> Option<(u8, u8)> {
    let mut parts = text.split(|&b| b == b'.' || b == b' ');
    let number = |p: &[u8]| -> Option<u8> {
        let digits = p.split(|b| !b.is_ascii_digit()).next()?;
        core::str::from_utf8(digits).ok()?.parse().ok()
    };
    Some((number(parts.next()?)?, number(parts.next()?)?))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version(b"3.11.7 (main, Jan  1 2024)"), Some((3, 11)));
        assert_eq!(parse_version(b"3.13.0rc1 experimental"), Some((3, 13)));
        assert_eq!(parse_version(b"garbage"), None);
        assert!(contains(
            b"3.13.0 experimental free-threading build",
            b"free-threading"
        ));
    }
}
