//! The interpreter this process runs, found once at load time: its layout (from its own
//! `_Py_DebugOffsets` on 3.13+, checked against the derived table), the functions the sampler
//! calls (resolved now: no lazy binding inside a signal handler), the addresses of
//! `PyCode_Type` and the types the self-check compares against; refusal, with a reason, for
//! builds we cannot walk safely. A layout the table does not vouch for (a minor newer than any
//! known, values that differ from it, or the tables turned off with `MLPROF_PYTHON_TABLES=0`)
//! walks nothing until it passes the self-check (`mlprof_pyframes::check`) on a live stack.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use mlprof_wire::python_status;

use mlprof_pyframes::check::{self, Check, Types};
use mlprof_pyframes::layouts::{self, Layout, Refusal, Source};
use mlprof_pyframes::Interpreter;

use super::read::{Direct, Windowed};

/// What the walker needs, copied out of the statics below.
#[derive(Clone, Copy)]
pub struct Runtime {
    /// Offsets for this build.
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
    pub fn interpreter(&self) -> Interpreter<'static> {
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

/// The layout frames are walked with: written once by `init` (load time, one thread) before
/// STATE leaves `NONE`, read-only afterwards.
struct LayoutCell(UnsafeCell<Layout>);
// SAFETY: written only by `init` before its publication through STATE (Release), read only
// after STATE is seen set (Acquire).
unsafe impl Sync for LayoutCell {}
static LAYOUT: LayoutCell = LayoutCell(UnsafeCell::new(layouts::PY313));

/// Where the walk stands: `NONE` (no layout), `WALK` (frames are walked), `PENDING` (a layout
/// that awaits its self-check), `FAILED` (it failed).
static STATE: AtomicU32 = AtomicU32::new(NONE);
const NONE: u32 = 0;
const WALK: u32 = 1;
const PENDING: u32 = 2;
const FAILED: u32 = 3;
/// Self-checks that failed while pending: one may be a stack caught halfway through a call,
/// [`MAX_FAILED_CHECKS`] of them with none passing is a layout that does not fit.
static FAILED_CHECKS: AtomicU32 = AtomicU32::new(0);
const MAX_FAILED_CHECKS: u32 = 8;

static GET_TSTATE: AtomicUsize = AtomicUsize::new(0);
static IS_INITIALIZED: AtomicUsize = AtomicUsize::new(0);
static CODE_TYPE: AtomicUsize = AtomicUsize::new(0);
static UNICODE_TYPE: AtomicUsize = AtomicUsize::new(0);
static BYTES_TYPE: AtomicUsize = AtomicUsize::new(0);
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

/// Whether the calling thread holds the GIL (`PyGILState_Check`; on a free-threaded build:
/// whether its thread state is attached); false if unknown. Not for signal handlers: it reads
/// thread-specific data with `pthread_getspecific`.
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

/// `(address of _PyRuntime, address of PyCode_Type)` when frames are or may be walked, for
/// the collector (which reads them only while the channel's status says frames are walked).
pub fn addresses() -> (usize, usize) {
    match STATE.load(Ordering::Acquire) {
        WALK | PENDING => (
            RUNTIME.load(Ordering::Relaxed),
            CODE_TYPE.load(Ordering::Relaxed),
        ),
        _ => (0, 0),
    }
}

/// The layout in use, if any (walked or awaiting its self-check).
pub fn layout() -> Option<&'static Layout> {
    match STATE.load(Ordering::Acquire) {
        // SAFETY: STATE leaves NONE only after `init` wrote LAYOUT (Release/Acquire).
        WALK | PENDING => Some(unsafe { &*LAYOUT.0.get() }),
        _ => None,
    }
}

fn runtime() -> Option<Runtime> {
    let layout = layout()?;
    let get_tstate = GET_TSTATE.load(Ordering::Relaxed);
    let is_initialized = IS_INITIALIZED.load(Ordering::Relaxed);
    if get_tstate == 0 || is_initialized == 0 {
        return None;
    }
    // SAFETY: both were stored by `init` from dlsym results for functions with these exact C
    // signatures in every supported CPython, before STATE was published.
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

/// The runtime, if Python frames are walked in this process.
#[inline]
pub fn get() -> Option<Runtime> {
    if STATE.load(Ordering::Acquire) != WALK {
        return None;
    }
    runtime()
}

/// The runtime if frames are walked, after running the self-check on this thread's stack if
/// it is pending (async-signal-safe: reads through the kernel, atomics only). The check's
/// outcome is told to the collector through the channel header's status.
#[inline]
pub fn get_or_check() -> Option<Runtime> {
    match STATE.load(Ordering::Acquire) {
        WALK => runtime(),
        PENDING => check_here(),
        _ => None,
    }
}

#[cold]
#[inline(never)]
fn check_here() -> Option<Runtime> {
    let rt = runtime()?;
    let tstate = rt.this_thread_state();
    if tstate == 0 {
        return None;
    }
    let types = Types {
        unicode: UNICODE_TYPE.load(Ordering::Relaxed),
        bytes: BYTES_TYPE.load(Ordering::Relaxed),
    };
    match check::self_check(&Windowed::new(), &rt.interpreter(), &types, tstate) {
        Check::Passed(_) => {
            if STATE
                .compare_exchange(PENDING, WALK, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                tell(python_status::WALKED_OFFSETS);
            }
            (STATE.load(Ordering::Acquire) == WALK).then_some(rt)
        }
        Check::NotYet => None,
        Check::Failed(_) => {
            if FAILED_CHECKS.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_FAILED_CHECKS
                && STATE
                    .compare_exchange(PENDING, FAILED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                tell(python_status::CHECK_FAILED);
            }
            None
        }
    }
}

/// Tell the collector a new status (the channel header's word).
fn tell(status: u32) {
    if let Some(ring) = crate::channel::ring() {
        ring.header().python_status.store(status, Ordering::Relaxed);
    }
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
    if symbol(c"_Py_NegativeRefcount") != 0 || symbol(c"_Py_RefTotal") != 0 {
        return python_status::UNSUPPORTED_VERSION; // a debug build: object layouts differ
    }
    let get_tstate = symbol(c"PyGILState_GetThisThreadState");
    let is_initialized = symbol(c"Py_IsInitialized");
    let code_type = symbol(c"PyCode_Type");
    let runtime = symbol(c"_PyRuntime");
    if get_tstate == 0 || is_initialized == 0 || code_type == 0 {
        return python_status::MISSING_SYMBOL;
    }
    if minor >= 13 && runtime == 0 {
        return python_status::MISSING_SYMBOL;
    }
    let free_threaded = free_threaded(version);
    let found = layouts::layout(&Direct, runtime, (major, minor), free_threaded, tables());
    let (layout, source) = match found {
        Ok(found) => found,
        Err(Refusal::Unsupported) => return python_status::UNSUPPORTED_VERSION,
        Err(Refusal::Unreadable | Refusal::NotTheTable | Refusal::Invalid(_)) => {
            return python_status::OFFSETS_MISMATCH
        }
    };
    RUNTIME.store(runtime, Ordering::Relaxed);
    let finalizing = match symbol(c"Py_IsFinalizing") {
        0 => symbol(c"_Py_IsFinalizing"),
        f => f,
    };
    IS_FINALIZING.store(finalizing, Ordering::Relaxed);
    GET_TSTATE.store(get_tstate, Ordering::Relaxed);
    CODE_TYPE.store(code_type, Ordering::Relaxed);
    UNICODE_TYPE.store(symbol(c"PyUnicode_Type"), Ordering::Relaxed);
    BYTES_TYPE.store(symbol(c"PyBytes_Type"), Ordering::Relaxed);
    // SAFETY: load time, one thread, before STATE publishes the cell.
    unsafe { *LAYOUT.0.get() = layout };
    match source {
        Source::Table => {
            STATE.store(WALK, Ordering::Release);
            python_status::WALKED
        }
        Source::Offsets => {
            STATE.store(PENDING, Ordering::Release);
            python_status::CHECK_PENDING
        }
    }
}

/// Whether this process may not read its own memory through the kernel: then no layout goes
/// unchecked (the self-check's reads would be plain loads), and none is walked.
pub fn refuse_reads() {
    STATE.store(NONE, Ordering::Release);
}

/// Whether `Py_GetVersion()`'s text names a free-threaded build ("3.13.5 experimental
/// free-threading build", "3.14.0 free-threading build").
pub fn free_threaded(version: &[u8]) -> bool {
    contains(version, b"free-threading")
}

/// `MLPROF_PYTHON_TABLES=0`: take every offset `_Py_DebugOffsets` carries from the
/// interpreter and self-check it, even where the derived table agrees (a test of the path a
/// newer minor takes, on the interpreters at hand).
fn tables() -> bool {
    // SAFETY: getenv with a valid C string at load time, before any thread can change the
    // environment; the result is read at once.
    let v = unsafe { libc::getenv(c"MLPROF_PYTHON_TABLES".as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    v.is_null() || unsafe { core::ffi::CStr::from_ptr(v) }.to_bytes() != b"0"
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
        assert_eq!(parse_version(b"3.15.2 (main, Oct 26 2026)"), Some((3, 15)));
        assert_eq!(parse_version(b"garbage"), None);
        assert!(free_threaded(
            b"3.13.5 experimental free-threading build (main)"
        ));
        assert!(free_threaded(b"3.14.0 free-threading build (main)"));
        assert!(!free_threaded(
            b"3.14.10 (main, Oct 26 2026, 15:12:11) [GCC 16.2.0]"
        ));
    }
}
