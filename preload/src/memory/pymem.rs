//! Wrapping Python's own allocator (`PyMem_SetAllocator`, domains MEM and OBJ), so that
//! objects served by pymalloc — invisible to the malloc hooks, which only see its 1 MiB
//! arenas — are sampled with their Python line and counted as Python bytes. Installed once the
//! interpreter is initialised, by a thread holding the GIL (those domains are only used under
//! the GIL, so nobody is reading the table we replace), from the sampling path of an
//! allocation hook. The wrapper forwards to the allocator it replaced, as the C API requires.
//! Free-threaded builds (whose objects mimalloc serves, never through `malloc`) get their own
//! wrappers, installed at load time, that also count each block in the heap
//! (`free_threaded.rs`).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libc::{c_int, c_void, size_t};
use mlprof_wire::alloc_flags;

use super::sampler;
use crate::local;
use crate::python::runtime;

/// `PyMemAllocatorEx` (CPython 3.5+).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Allocator {
    pub(super) ctx: *mut c_void,
    pub(super) malloc: Option<extern "C" fn(*mut c_void, size_t) -> *mut c_void>,
    pub(super) calloc: Option<extern "C" fn(*mut c_void, size_t, size_t) -> *mut c_void>,
    pub(super) realloc: Option<extern "C" fn(*mut c_void, *mut c_void, size_t) -> *mut c_void>,
    pub(super) free: Option<extern "C" fn(*mut c_void, *mut c_void)>,
}

const EMPTY: Allocator = Allocator {
    ctx: core::ptr::null_mut(),
    malloc: None,
    calloc: None,
    realloc: None,
    free: None,
};

/// The allocators we replaced, for domains MEM and OBJ; written once, under the GIL, before
/// `INSTALLED` is set; our wrappers receive a pointer to their entry as `ctx`.
struct Saved(UnsafeCell<[Allocator; 2]>);
// SAFETY: written only by `install` (once, before publication through INSTALLED and before
// any wrapper can run), read-only afterwards.
unsafe impl Sync for Saved {}
static SAVED: Saved = Saved(UnsafeCell::new([EMPTY; 2]));

/// `PyObjectArenaAllocator`: where pymalloc gets its arenas (256 KiB up to 3.9, 1 MiB after).
#[repr(C)]
#[derive(Clone, Copy)]
struct ArenaAllocator {
    ctx: *mut c_void,
    alloc: Option<extern "C" fn(*mut c_void, size_t) -> *mut c_void>,
    free: Option<extern "C" fn(*mut c_void, *mut c_void, size_t)>,
}

/// The arena allocator we replaced (same discipline as SAVED).
struct SavedArena(UnsafeCell<ArenaAllocator>);
// SAFETY: written once by `install` before our arena functions are installed, read-only after.
unsafe impl Sync for SavedArena {}
static SAVED_ARENA: SavedArena = SavedArena(UnsafeCell::new(ArenaAllocator {
    ctx: core::ptr::null_mut(),
    alloc: None,
    free: None,
}));
static GET_ARENA: AtomicUsize = AtomicUsize::new(0);
static SET_ARENA: AtomicUsize = AtomicUsize::new(0);

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The wrappers are the free-threaded ones (`free_threaded.rs`).
static FREE_THREADED: AtomicBool = AtomicBool::new(false);
static GET: AtomicUsize = AtomicUsize::new(0);
static SET: AtomicUsize = AtomicUsize::new(0);

const DOMAIN_MEM: c_int = 1;
const DOMAIN_OBJ: c_int = 2;

/// Resolve the C API functions (load time). Wrapping happens only if all are found.
pub fn resolve() {
    let sym = |name: &core::ffi::CStr| {
        // SAFETY: dlsym with a valid C string, at load time.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    };
    GET.store(sym(c"PyMem_GetAllocator"), Ordering::Relaxed);
    SET.store(sym(c"PyMem_SetAllocator"), Ordering::Relaxed);
    GET_ARENA.store(sym(c"PyObject_GetArenaAllocator"), Ordering::Relaxed);
    SET_ARENA.store(sym(c"PyObject_SetArenaAllocator"), Ordering::Relaxed);
}

/// Count pymalloc's arenas in the exact heap: wrap the arena allocator (its functions are only
/// called under the GIL, which the installing thread holds).
fn wrap_arenas() {
    let (get, set) = (
        GET_ARENA.load(Ordering::Relaxed),
        SET_ARENA.load(Ordering::Relaxed),
    );
    if get == 0 || set == 0 {
        return;
    }
    // SAFETY: CPython's `PyObject_GetArenaAllocator` / `PyObject_SetArenaAllocator`, which
    // take a pointer to this exact struct (C API since 3.4).
    let (get, set) = unsafe {
        (
            core::mem::transmute::<usize, extern "C" fn(*mut ArenaAllocator)>(get),
            core::mem::transmute::<usize, extern "C" fn(*const ArenaAllocator)>(set),
        )
    };
    let saved = SAVED_ARENA.0.get();
    get(saved);
    let ours = ArenaAllocator {
        ctx: saved.cast(),
        alloc: Some(arena_alloc),
        free: Some(arena_free),
    };
    set(&ours);
}

extern "C" fn arena_alloc(ctx: *mut c_void, size: size_t) -> *mut c_void {
    // SAFETY: `ctx` is SAVED_ARENA, written before this function was installed.
    let orig = unsafe { *(ctx as *const ArenaAllocator) };
    let Some(f) = orig.alloc else {
        return core::ptr::null_mut();
    };
    // Inside: the arena's own `mmap` is heap, not a mapping of the program's.
    let ptr = local::with(|l| {
        let _inside = l.hold();
        f(orig.ctx, size)
    });
    if !ptr.is_null() && super::regions::insert(ptr as usize, size) {
        let now = crate::heap::counters().add(size as u64);
        crate::marks::allocated(now);
    }
    ptr
}

extern "C" fn arena_free(ctx: *mut c_void, ptr: *mut c_void, size: size_t) {
    // SAFETY: as in `arena_alloc`.
    let orig = unsafe { *(ctx as *const ArenaAllocator) };
    let counted = super::regions::remove(ptr as usize);
    if counted > 0 {
        crate::heap::counters().sub(counted as u64);
    }
    if let Some(f) = orig.free {
        // Inside, as in `arena_alloc`: its `munmap` is no concern of the mapping hooks.
        local::with(|l| {
            let _inside = l.hold();
            f(orig.ctx, ptr, size)
        });
    }
}

/// Whether Python's arenas are mapped uncounted: the interpreter's arena allocator exists and
/// is not wrapped yet, so a mapping now may be one of its arenas (which count in the heap once
/// wrapped), not the program's own.
#[inline]
pub fn arenas_uncounted() -> bool {
    GET_ARENA.load(Ordering::Relaxed) != 0 && !INSTALLED.load(Ordering::Acquire)
}

/// Install the wrapper if it is not yet and this is the moment (interpreter initialised, GIL
/// held by this thread). Called from the sampling path only, so the checks are rare. A
/// free-threaded build's wrapper is installed at load time instead ([`install_free_threaded`]);
/// here it is only checked, once, to be still in place.
pub fn install_if_ready() {
    if FREE_THREADED.load(Ordering::Relaxed) {
        super::free_threaded::confirm();
        return;
    }
    if INSTALLED.load(Ordering::Acquire) || !sampler::alloc_sampling() {
        return;
    }
    let [get, set] = [&GET, &SET].map(|a| a.load(Ordering::Relaxed));
    if get == 0 || set == 0 {
        return;
    }
    // The host's errno, whatever the calls below do to it.
    let _errno = crate::errno::Saved::new();
    // SAFETY: the addresses are CPython's functions with these exact C signatures (C API since
    // 3.5), resolved at load time.
    let (get, set) = unsafe {
        (
            core::mem::transmute::<usize, extern "C" fn(c_int, *mut Allocator)>(get),
            core::mem::transmute::<usize, extern "C" fn(c_int, *const Allocator)>(set),
        )
    };
    if !runtime::initialized() || !runtime::holds_gil() || INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    wrap_arenas();
    let saved = SAVED.0.get() as *mut Allocator;
    for (i, domain) in [DOMAIN_MEM, DOMAIN_OBJ].into_iter().enumerate() {
        // SAFETY: entry `i` of SAVED, written before any wrapper using it is installed; this
        // thread holds the GIL, so no other thread uses these domains meanwhile.
        let entry = unsafe { saved.add(i) };
        get(domain, entry);
        let ours = Allocator {
            ctx: entry.cast(),
            malloc: Some(wrapped_malloc),
            calloc: Some(wrapped_calloc),
            realloc: Some(wrapped_realloc),
            free: Some(wrapped_free),
        };
        set(domain, &ours);
    }
}

/// A free-threaded build (its layout says where mimalloc keeps block sizes): wrap MEM and OBJ
/// now, at load time, before the interpreter has allocated anything through them and while
/// this is the only thread, so every object is counted in the heap from its allocation to its
/// free (`free_threaded.rs`). Tells the channel header how objects are counted.
pub fn install_free_threaded(header: &mlprof_wire::Header) {
    use mlprof_wire::python_heap;
    let Some(m) = runtime::layout().and_then(|l| l.mimalloc) else {
        return;
    };
    let [get, set] = [&GET, &SET].map(|a| a.load(Ordering::Relaxed));
    if get == 0 || set == 0 || INSTALLED.swap(true, Ordering::AcqRel) {
        header
            .python_heap
            .store(python_heap::UNWRAPPED, Ordering::Relaxed);
        return;
    }
    // SAFETY: as in `install_if_ready`: CPython's functions with these exact C signatures.
    let (get, set) = unsafe {
        (
            core::mem::transmute::<usize, extern "C" fn(c_int, *mut Allocator)>(get),
            core::mem::transmute::<usize, extern "C" fn(c_int, *const Allocator)>(set),
        )
    };
    super::free_threaded::set_layout(m);
    FREE_THREADED.store(true, Ordering::Relaxed);
    let saved = SAVED.0.get() as *mut Allocator;
    for (i, domain) in [DOMAIN_MEM, DOMAIN_OBJ].into_iter().enumerate() {
        // SAFETY: entry `i` of SAVED, written before any wrapper using it is installed; load
        // time, before `main`: no other thread exists to allocate meanwhile.
        let entry = unsafe { saved.add(i) };
        get(domain, entry);
        set(domain, &super::free_threaded::wrappers(entry.cast()));
    }
    header
        .python_heap
        .store(python_heap::MIMALLOC, Ordering::Relaxed);
}

/// Whether the wrappers are the free-threaded ones.
pub(super) fn free_threaded() -> bool {
    FREE_THREADED.load(Ordering::Relaxed)
}

/// The OBJ domain's allocator in place now (`PyMem_GetAllocator`), if the C API was found.
pub(super) fn current_obj() -> Option<Allocator> {
    let get = GET.load(Ordering::Relaxed);
    if get == 0 {
        return None;
    }
    // SAFETY: CPython's `PyMem_GetAllocator`, resolved at load time (C API since 3.5); it
    // copies the domain's allocator into our local.
    let get = unsafe { core::mem::transmute::<usize, extern "C" fn(c_int, *mut Allocator)>(get) };
    let mut now = EMPTY;
    get(DOMAIN_OBJ, &mut now);
    Some(now)
}

/// The allocator we wrapped, from the `ctx` our wrappers receive.
#[inline]
pub(super) fn original(ctx: *mut c_void) -> &'static Allocator {
    // SAFETY: `ctx` is the address of a SAVED entry, written before this wrapper was installed
    // and never written again.
    unsafe { &*(ctx as *const Allocator) }
}

/// Requests up to this size are served by pymalloc from its arenas, without calling malloc.
const SMALL_REQUEST: usize = 512;

/// Call the wrapped allocator with this thread marked busy (its own malloc calls are not
/// samples: they are sampled here, as Python bytes), then sample the result. The common path
/// is a countdown; a sample is taken out of line.
#[inline(always)]
fn allocate(size: usize, call: impl FnOnce() -> *mut c_void) -> *mut c_void {
    local::with(|l| {
        let ptr = if size <= SMALL_REQUEST {
            call()
        } else {
            let _held = l.hold();
            call()
        };
        if ptr.is_null() || l.busy() {
            return ptr;
        }
        if let Some(weight) = sampler::alloc_due(l, size) {
            sample(l, ptr, size, weight);
        }
        // The peak mark the malloc inside held back, now that the block is sampled.
        super::mark_if_due(crate::heap::counters().current.load(Ordering::Relaxed));
        ptr
    })
}

/// Record a sampled Python allocation.
#[cold]
#[inline(never)]
pub(super) fn sample(l: &local::Local, ptr: *mut c_void, size: usize, weight: u64) {
    let _entered = l.hold();
    // Python's MEM and OBJ allocators are called with the GIL held.
    let reads = sampler::reads(true);
    sampler::record_alloc(ptr as usize, size, weight, alloc_flags::PYTHON, reads);
}

/// Whether a Python allocation of `size` bytes needs nothing but the countdown (no sample is
/// due, no hold around the call): then the wrapper counts it before the call and tail-calls
/// the wrapped allocator. (A failed allocation is counted too: the error is one allocation's
/// bytes in the gap to the next sample.)
#[inline(always)]
fn counted_only(size: usize) -> bool {
    size <= SMALL_REQUEST && local::with(|l| !l.busy() && sampler::alloc_countdown(l, size))
}

extern "C" fn wrapped_malloc(ctx: *mut c_void, size: size_t) -> *mut c_void {
    let orig = original(ctx);
    let Some(f) = orig.malloc else {
        return core::ptr::null_mut();
    };
    if counted_only(size) {
        return f(orig.ctx, size);
    }
    malloc_slow(f, orig.ctx, size)
}

#[inline(never)]
fn malloc_slow(
    f: extern "C" fn(*mut c_void, size_t) -> *mut c_void,
    ctx: *mut c_void,
    size: size_t,
) -> *mut c_void {
    allocate(size, || f(ctx, size))
}

extern "C" fn wrapped_calloc(ctx: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    let orig = original(ctx);
    let Some(f) = orig.calloc else {
        return core::ptr::null_mut();
    };
    let bytes = n.saturating_mul(size);
    if counted_only(bytes) {
        return f(orig.ctx, n, size);
    }
    calloc_slow(f, orig.ctx, n, size)
}

#[inline(never)]
fn calloc_slow(
    f: extern "C" fn(*mut c_void, size_t, size_t) -> *mut c_void,
    ctx: *mut c_void,
    n: size_t,
    size: size_t,
) -> *mut c_void {
    allocate(n.saturating_mul(size), || f(ctx, n, size))
}

extern "C" fn wrapped_realloc(ctx: *mut c_void, old: *mut c_void, size: size_t) -> *mut c_void {
    let orig = original(ctx);
    let Some(f) = orig.realloc else {
        return core::ptr::null_mut();
    };
    if !old.is_null() {
        super::freeing(old as usize);
    }
    allocate(size, || f(orig.ctx, old, size))
}

extern "C" fn wrapped_free(ctx: *mut c_void, ptr: *mut c_void) {
    let orig = original(ctx);
    let Some(f) = orig.free else { return };
    // Installed only while allocation sampling is on, so the filter is asked directly (NULL
    // and never-sampled addresses stop there or in the table: 0 and 1 are never inserted).
    sampler::record_free(ptr as usize);
    f(orig.ctx, ptr);
}
