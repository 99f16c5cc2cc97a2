//! The wrappers around a free-threaded CPython's allocator (domains MEM and OBJ, both served by
//! mimalloc, never through `malloc`): each block is counted in the exact heap by its mimalloc
//! size (`mimalloc.rs`) from its allocation to its free, then sampled as Python bytes as on the
//! default build. Installed at load time (`pymem::install_free_threaded`), so no block the
//! interpreter frees was allocated uncounted. Called by any number of threads at once (there is
//! no GIL): atomics and this thread's own state only. Always forwarded on the calling thread:
//! the interpreter picks the thread's mimalloc heap from its thread state.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use mlprof_pyframes::Memory;

use libc::{c_void, size_t};
use mlprof_pyframes::layouts::Mimalloc;

use super::pymem::{original, sample, Allocator};
use super::{mimalloc, sampler};
use crate::{heap, local};

/// mimalloc's metadata offsets, written once by [`set_layout`] before the wrappers are
/// installed, read-only after.
struct Layout(UnsafeCell<Mimalloc>);
// SAFETY: written only by `set_layout`, at load time before any wrapper can run (their
// installation publishes it), read-only afterwards.
unsafe impl Sync for Layout {}
static LAYOUT: Layout = Layout(UnsafeCell::new(Mimalloc {
    segment_shift: 25,
    slice_shift: 16,
    segment_slices: 0,
    slices_per_segment: 0,
    slice_size: 0,
    page_slice_offset: 0,
    page_block_size: 0,
    block_size_bytes: 4,
}));

/// Record where mimalloc keeps block sizes (load time, before the wrappers are installed).
pub(super) fn set_layout(m: Mimalloc) {
    // SAFETY: load time, one thread, before the wrappers that read it are installed.
    unsafe { *LAYOUT.0.get() = m };
}

#[inline(always)]
fn layout() -> &'static Mimalloc {
    // SAFETY: written once before the wrappers were installed (see `Layout`).
    unsafe { &*LAYOUT.0.get() }
}

/// Our allocator for a domain whose saved original is at `ctx`.
pub(super) fn wrappers(ctx: *mut c_void) -> Allocator {
    Allocator {
        ctx,
        malloc: Some(ft_malloc),
        calloc: Some(ft_calloc),
        realloc: Some(ft_realloc),
        free: Some(ft_free),
    }
}

/// Heap bytes a thread gathers before they go into the shared counters: every Python object's
/// allocation and free is counted, but the counters (shared by all threads, which run at once)
/// move once per this much change, so the heap and its peak are exact to within this per
/// thread. Its frees and allocations of the same size cancel out without touching them.
const FLUSH_BYTES: i64 = 256 << 10;

/// Put this thread's gathered heap change into the shared counters; the heap now.
#[cold]
#[inline(never)]
fn flush_local(l: &local::Local) -> i64 {
    let delta = l.heap_pending.replace(0);
    // Objects count in the heap's bytes, not in its allocation totals (pymalloc's do not
    // either, on the default build).
    let now = heap::counters().add_batch(delta, 0, 0);
    crate::marks::allocated(now);
    if !l.busy() {
        super::mark_if_due(now);
    }
    now
}

/// Put the calling thread's gathered heap change into the shared counters (its end, the
/// process's exit, a fork).
pub fn flush() {
    local::with(|l| {
        if l.heap_pending.get() != 0 {
            flush_local(l);
        }
    });
}

/// Count a block of `size` bytes just allocated; whether the thread's share is due to go into
/// the shared counters.
#[inline(always)]
fn count(l: &local::Local, size: usize) -> bool {
    let pending = l.heap_pending.get() + size as i64;
    l.heap_pending.set(pending);
    pending >= FLUSH_BYTES
}

/// Take a block of `size` bytes about to be freed out of this thread's share of the heap.
#[inline(always)]
fn uncount(l: &local::Local, size: usize) {
    let pending = l.heap_pending.get() - size as i64;
    l.heap_pending.set(pending);
    if pending <= -FLUSH_BYTES {
        flush_local(l);
    }
}

/// After the wrapped allocator gave `ptr` for `asked` bytes (the thread was marked busy for
/// the call: mappings mimalloc makes inside are heap, not the program's; `outer`: it was not
/// busy before): count the block, sample it if due. The common path is a few loads and a
/// countdown.
#[inline(always)]
fn allocated(l: &local::Local, ptr: *mut c_void, asked: usize, outer: bool) -> *mut c_void {
    if ptr.is_null() {
        return ptr;
    }
    let size = mimalloc::block_size(layout(), ptr as usize, asked);
    let flush = count(l, size);
    if outer && sampler::alloc_countdown(l, asked) {
        if flush {
            flush_local(l);
        }
        return ptr;
    }
    allocated_slow(l, ptr, asked, outer);
    ptr
}

#[cold]
#[inline(never)]
fn allocated_slow(l: &local::Local, ptr: *mut c_void, asked: usize, outer: bool) {
    // The heap as it is with this block, for the peak mark the sample may follow.
    flush_local(l);
    if !outer {
        return;
    }
    if let Some(weight) = sampler::alloc_due(l, asked) {
        sample(l, ptr, asked, weight);
        super::mark_if_due(heap::counters().current.load(Ordering::Relaxed));
    }
}

/// Call `call` with the thread marked busy, then count its block.
#[inline(always)]
fn allocate(asked: usize, call: impl FnOnce() -> *mut c_void) -> *mut c_void {
    local::with(|l| {
        let (ptr, outer) = {
            let held = l.hold();
            (call(), held.was_free())
        };
        allocated(l, ptr, asked, outer)
    })
}

extern "C" fn ft_malloc(ctx: *mut c_void, size: size_t) -> *mut c_void {
    let orig = original(ctx);
    let Some(f) = orig.malloc else {
        return core::ptr::null_mut();
    };
    allocate(size, || f(orig.ctx, size))
}

extern "C" fn ft_calloc(ctx: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    let orig = original(ctx);
    let Some(f) = orig.calloc else {
        return core::ptr::null_mut();
    };
    allocate(n.saturating_mul(size), || f(orig.ctx, n, size))
}

extern "C" fn ft_realloc(ctx: *mut c_void, old: *mut c_void, size: size_t) -> *mut c_void {
    let orig = original(ctx);
    let Some(f) = orig.realloc else {
        return core::ptr::null_mut();
    };
    if old.is_null() {
        return allocate(size, || f(orig.ctx, old, size));
    }
    super::freeing(old as usize);
    // Its size before the call: after it the block may be gone. A failed realloc keeps the
    // old block, which is counted again as it stays.
    let before = mimalloc::block_size(layout(), old as usize, 0);
    local::with(|l| uncount(l, before));
    let new = allocate(size, || f(orig.ctx, old, size));
    if new.is_null() && size > 0 {
        local::with(|l| l.heap_pending.set(l.heap_pending.get() + before as i64));
    }
    new
}

extern "C" fn ft_free(ctx: *mut c_void, ptr: *mut c_void) {
    let orig = original(ctx);
    let Some(f) = orig.free else { return };
    if !ptr.is_null() {
        sampler::record_free(ptr as usize);
        let size = mimalloc::block_size(layout(), ptr as usize, 0);
        local::with(|l| uncount(l, size));
    }
    f(orig.ctx, ptr);
}

/// Whether [`confirm`] has run.
static CONFIRMED: AtomicBool = AtomicBool::new(false);

/// Words of a wrapper's context searched for our function: tracemalloc keeps the allocator it
/// wraps (`PyMemAllocatorEx`, its `malloc` second) as its context.
const CONTEXT_WORDS: usize = 8;

/// Called at sampled `malloc`s, once the interpreter runs: whether our wrappers are still the
/// allocator. Start-up replaces them under `PYTHONMALLOC` or `-X dev` (its debug hooks wrap
/// the default allocator, not ours), and then no object is counted; a tool that wraps what it
/// finds (tracemalloc) keeps ours underneath, its context holding our function. And whether
/// mimalloc's metadata read as expected. The channel header says so.
pub(super) fn confirm() {
    if crate::python::runtime::initialized() {
        check();
    }
}

/// [`confirm`] at the process's normal exit (never from `_exit`: `PyMem_GetAllocator` takes a
/// lock), if it has not run (a program whose objects alone were allocated after start-up makes
/// no sampled `malloc` to run it): the interpreter has been finalised by then, its allocators
/// are still those it ran with.
pub fn confirm_at_exit() {
    if super::pymem::free_threaded() {
        check();
    }
}

fn check() {
    use mlprof_wire::python_heap;
    if CONFIRMED.load(Ordering::Relaxed) {
        return;
    }
    let Some(ring) = crate::channel::ring() else {
        return;
    };
    if CONFIRMED.swap(true, Ordering::Relaxed) {
        return;
    }
    let status = &ring.header().python_heap;
    let Some(now) = super::pymem::current_obj() else {
        return;
    };
    let ours = ft_malloc as extern "C" fn(*mut c_void, size_t) -> *mut c_void as usize;
    let on_top = now.malloc.is_some_and(|f| f as usize == ours);
    let underneath = || {
        // Read through the kernel: the context is another library's.
        (0..CONTEXT_WORDS)
            .any(|i| crate::python::read::Direct.word(now.ctx as usize + 8 * i) == Some(ours))
    };
    if !on_top && !underneath() {
        status.store(python_heap::REPLACED, Ordering::Relaxed);
    } else if mimalloc::off() {
        status.store(python_heap::UNREADABLE, Ordering::Relaxed);
    }
}
