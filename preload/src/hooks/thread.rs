//! Thread hooks: every new thread gets its CPU-time timer before it runs user code, announces
//! itself (kernel tid and `pthread_self`), and deletes its timer when it ends.

use libc::{c_int, c_void};

use crate::{channel, clock, real, sampler};

/// What the trampoline needs: the user's start routine and argument.
struct Start {
    routine: real::StartRoutine,
    arg: *mut c_void,
}

/// Interposed `pthread_create`: the new thread starts in [`trampoline`].
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
    unsafe { start.write(Start { routine, arg }) };
    // SAFETY: forwarded caller contract; the trampoline takes ownership of `start`.
    let r = unsafe { real::pthread_create(thread, attr, trampoline, start.cast()) };
    if r != 0 {
        // SAFETY: the thread was not created, so the block is still ours.
        unsafe { real::free(start.cast()) };
    }
    r
}

/// The new thread's entry. "C-unwind": a `pthread_exit` deep in `routine` force-unwinds
/// through this frame (which owns nothing that needs dropping by then).
extern "C-unwind" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: `start` is the block written by `pthread_create` above, owned by this thread.
    let Start { routine, arg } = unsafe { (start as *mut Start).read() };
    // SAFETY: freeing that block once.
    unsafe { real::free(start) };
    announce();
    sampler::timer::arm_this_thread();
    let result = routine(arg);
    sampler::timer::disarm_this_thread();
    result
}

/// Send a thread-start record for the calling thread.
pub fn announce() {
    let mut rec = mlprof_wire::Record::new(
        mlprof_wire::Kind::ThreadStart,
        clock::tid(),
        clock::monotonic_ns(),
    );
    rec.a = clock::tid() as u64;
    // SAFETY: pthread_self has no preconditions.
    rec.b = unsafe { libc::pthread_self() } as u64;
    channel::send(&rec);
}

/// Interposed `pthread_exit`: delete the thread's timer first. "C-unwind" because the real
/// `pthread_exit` force-unwinds the thread's stack through this frame.
#[cfg_attr(not(test), no_mangle)]
pub extern "C-unwind" fn pthread_exit(value: *mut c_void) -> ! {
    sampler::timer::disarm_this_thread();
    real::pthread_exit(value)
}
