//! Thread hooks: every new thread gets its CPU-time timer before it runs user code, announces
//! itself (kernel tid and `pthread_self`), and deletes its timer when it ends: returning,
//! `pthread_exit` or cancelled. `pthread_exit` itself is not interposed: the thread's only frame
//! of ours is the C trampoline, which a forced unwind passes through.

use libc::{c_int, c_void};

use crate::{channel, clock, real, sampler};

/// What the C trampoline (`csrc/thread.c`, `struct mlprof_thread_start`) needs: the user's
/// start routine and argument, and what to run when the thread begins and ends.
#[repr(C)]
struct Start {
    routine: real::StartRoutine,
    arg: *mut c_void,
    begin: extern "C" fn(*mut c_void),
    end: extern "C" fn(*mut c_void),
}

extern "C-unwind" {
    /// The thread entry, in C so that a forced unwind never meets a Rust frame.
    fn mlprof_thread_trampoline(start: *mut c_void) -> *mut c_void;
}

/// Interposed `pthread_create`: the new thread starts in the C trampoline, which calls
/// [`begin`] and then the user's routine, with [`end`] as its cleanup handler.
///
/// # Safety
/// The C contract of `pthread_create`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: real::StartRoutine,
    arg: *mut c_void,
) -> c_int {
    if sampler::timer::mean_interval() == 0 {
        // SAFETY: forwarded caller contract.
        return unsafe { real::pthread_create(thread, attr, routine, arg) };
    }
    // Not an allocation hook: the real allocator may be used here.
    let start = real::malloc(core::mem::size_of::<Start>()) as *mut Start;
    if start.is_null() {
        // SAFETY: forwarded caller contract.
        return unsafe { real::pthread_create(thread, attr, routine, arg) };
    }
    // SAFETY: `start` is a fresh, suitably aligned block of the right size.
    unsafe {
        start.write(Start {
            routine,
            arg,
            begin,
            end,
        })
    };
    // SAFETY: forwarded caller contract; the trampoline takes ownership of `start`.
    let r = unsafe { real::pthread_create(thread, attr, mlprof_thread_trampoline, start.cast()) };
    if r != 0 {
        // SAFETY: the thread was not created, so the block is still ours.
        unsafe { real::free(start.cast()) };
    }
    r
}

/// The new thread begins (called by the trampoline, which has copied the block): free the
/// block, announce the thread, arm its CPU timer. Returns normally; never unwinds.
extern "C" fn begin(start: *mut c_void) {
    // SAFETY: the block written by `pthread_create` above, owned by this thread and no longer
    // read by the trampoline.
    unsafe { real::free(start) };
    announce();
    sampler::timer::arm_this_thread();
}

/// The thread ends: by returning, by `pthread_exit` or by cancellation (a cleanup handler).
extern "C" fn end(_: *mut c_void) {
    sampler::timer::send_tail();
    crate::memory::free_threaded::flush(); // its Python objects' heap change
    sampler::timer::disarm_this_thread();
    sampler::altstack::release_for_this_thread();
}

/// Send a thread-start record for the calling thread.
pub fn announce() {
    // SAFETY: pthread_self has no preconditions.
    let pthread = unsafe { libc::pthread_self() } as u64;
    let tid = clock::tid();
    let started = mlprof_wire::ThreadStart {
        tid,
        pthread,
        waiting_cell: super::wait::waiting_cell(),
    };
    channel::send(&mlprof_wire::Record::thread_start(
        tid,
        clock::monotonic_ns(),
        started,
    ));
    super::signal::announce_mask();
}
