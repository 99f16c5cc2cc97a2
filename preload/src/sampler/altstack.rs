//! mlprof's own signal stack for each thread it samples. The kernel writes a signal's frame
//! below the interrupted stack pointer, and code generated at run time (oneDNN's GEMM kernels
//! in JAX/XLA and TensorFlow) keeps live data below its stack pointer, past the 128-byte red
//! zone: a SIGPROF taken on such a thread's own stack overwrote that data and crashed the
//! program (`docs/design/signal-stack.md`). So the SIGPROF handler is installed with
//! `SA_ONSTACK`, every thread whose CPU timer mlprof arms gets an alternate stack of ours, and
//! the frame walk always runs on our stack: where the program registered a stack of its own
//! (faulthandler's 10 KB one on the main thread), the handler's frame is small enough for it and
//! the walk moves onto ours, with the program's other signals held back meanwhile so that none
//! lands on the program's stack over our frame.

use crate::real;

/// Usable bytes of our stack: the kernel's signal frame (up to ~11 KiB with AMX state), the
/// handler and the frame walk (`python::stack::STACK_NEEDED`), with room to spare.
const SIZE: usize = 64 << 10;

/// An inaccessible guard below it: an overflow faults instead of writing into a neighbour.
const GUARD: usize = 64 << 10;

/// The range `[low, high)` of the calling thread's stack of ours, if it has one.
fn ours() -> Option<(usize, usize)> {
    let base = crate::local::with(|l| l.altstack.get()) as usize;
    (base != 0).then(|| (base + GUARD, base + GUARD + SIZE))
}

/// Give the calling thread its stack of ours (when its CPU timer is armed), and register it as
/// the thread's alternate signal stack unless the program has registered one of its own, which
/// is left in place. A fork child keeps the one it inherited. Never allocates from the heap.
pub fn ensure_for_this_thread() {
    if ours().is_some() {
        return;
    }
    // SAFETY: a fresh private anonymous mapping (the system call, not our `mmap` hook, so it is
    // never counted as the program's memory).
    let base = unsafe {
        real::mmap(
            core::ptr::null_mut(),
            GUARD + SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return; // no stack: the handler then runs where the kernel puts it, as before
    }
    // SAFETY: the guard is the low end of the mapping just made, which nothing else uses.
    if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
        // SAFETY: our own mapping, unused.
        unsafe { real::munmap(base, GUARD + SIZE) };
        return;
    }
    crate::local::with(|l| l.altstack.set(base as u64));
    // SAFETY: stack_t is plain data.
    let mut current: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: a query into a valid out-pointer.
    let queried = unsafe { libc::sigaltstack(core::ptr::null(), &mut current) } == 0;
    if queried && current.ss_flags & libc::SS_DISABLE != 0 {
        let mine = libc::stack_t {
            ss_sp: (base as usize + GUARD) as *mut libc::c_void,
            ss_flags: 0,
            ss_size: SIZE,
        };
        // SAFETY: registers memory this thread owns until `release_for_this_thread`.
        unsafe { libc::sigaltstack(&mine, core::ptr::null_mut()) };
    }
}

/// The thread ends: unregister our stack (if it is still the registered one) and unmap it.
/// Kept when the thread is ending on it (a handler that called `pthread_exit`).
pub fn release_for_this_thread() {
    let Some((low, _)) = ours() else { return };
    // SAFETY: stack_t is plain data.
    let mut current: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: a query into a valid out-pointer.
    if unsafe { libc::sigaltstack(core::ptr::null(), &mut current) } != 0 {
        return;
    }
    let registered = current.ss_sp as usize == low && current.ss_flags & libc::SS_DISABLE == 0;
    if registered {
        if current.ss_flags & libc::SS_ONSTACK != 0 || on_ours() {
            return;
        }
        let off = libc::stack_t {
            ss_sp: core::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: disabling the alternate stack of this thread, which is not running on it.
        if unsafe { libc::sigaltstack(&off, core::ptr::null_mut()) } != 0 {
            return;
        }
    } else if on_ours() {
        return;
    }
    crate::local::with(|l| l.altstack.set(0));
    // SAFETY: our own mapping; no longer registered with the kernel and not in use.
    unsafe { real::munmap((low - GUARD) as *mut libc::c_void, GUARD + SIZE) };
}

/// Whether the calling code runs on our stack now.
#[inline]
fn on_ours() -> bool {
    let here = stack_pointer();
    ours().is_some_and(|(low, high)| (low..high).contains(&here))
}

#[inline(always)]
fn stack_pointer() -> usize {
    let marker = 0u8;
    core::hint::black_box(&marker) as *const u8 as usize
}

/// Run `f` on the calling thread's stack of ours: directly when already there (the common
/// case: our stack is the registered one), else with a switch of the stack pointer. Called
/// from the SIGPROF handler only.
pub fn run_on_ours(f: &mut dyn FnMut()) {
    let Some((low, high)) = ours() else {
        f(); // no stack of ours: as before, where the kernel delivered the signal
        return;
    };
    let here = stack_pointer();
    if (low..high).contains(&here) || !can_switch() {
        f();
        return;
    }
    // On the program's own alternate stack (or on the thread's stack, if the program turned
    // alternate stacks off): hold the program's asynchronous signals back while we are off
    // the stack the kernel would deliver them on, then move to the top of ours.
    // SAFETY: sigset_t is plain data, filled by sigfillset.
    let mut all: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: sigset_t is plain data.
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: valid sigset pointers; synchronous signals stay deliverable (blocking them and
    // then faulting would kill the program).
    unsafe {
        libc::sigfillset(&mut all);
        for sig in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut all, sig);
        }
        mask(libc::SIG_BLOCK, &all, &mut old);
    }
    // SAFETY: `high` is the 16-aligned top of our own mapping, not in use (the handler is not
    // reentrant: SIGPROF is blocked while it runs, and we are not on that stack now).
    unsafe { switch(high & !15, f) };
    // SAFETY: restoring the mask saved above.
    unsafe { mask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
}

/// The thread's signal mask changed by the system call itself: `pthread_sigmask` would go
/// through this library's own hook of it, which took the handler's block for the program's
/// and, the kernel restoring the mask on return, reported SIGPROF "blocked to its end" on
/// every thread sampled on the program's signal stack (pytest's faulthandler).
///
/// # Safety
/// `set` and `old` valid for a `sigset_t`, or `old` null.
unsafe fn mask(how: libc::c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) {
    // SAFETY: the caller's pointers; the kernel's sigset is 8 bytes (64 signals).
    unsafe { libc::syscall(libc::SYS_rt_sigprocmask, how, set, old, 8usize) };
}

const fn can_switch() -> bool {
    cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
}

extern "C" fn call(f: *mut core::ffi::c_void) {
    // SAFETY: `switch` passes a pointer to a live `&mut dyn FnMut()` on the caller's stack.
    let f = unsafe { &mut *(f as *mut &mut dyn FnMut()) };
    f();
}

/// Call `f` with the stack pointer at `top`, then come back to the caller's stack.
///
/// # Safety
/// `top` must be the 16-byte-aligned top of writable memory, large enough for `f`, that
/// nothing else uses while `f` runs.
#[allow(unused_variables, unused_mut)]
unsafe fn switch(top: usize, mut f: &mut dyn FnMut()) {
    let arg = &mut f as *mut &mut dyn FnMut() as *mut core::ffi::c_void;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; r12 is callee-saved, so it holds the old stack pointer
    // across the call; `call` follows the C ABI (clobber_abi), and the stack at `top` is
    // 16-aligned at the call instruction as the ABI requires.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) call as extern "C" fn(*mut core::ffi::c_void),
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above, with x20 (callee-saved) holding the old stack pointer.
    unsafe {
        core::arch::asm!(
            "mov x20, sp",
            "mov sp, {top}",
            "blr {f}",
            "mov sp, x20",
            top = in(reg) top,
            f = in(reg) call as extern "C" fn(*mut core::ffi::c_void),
            in("x0") arg,
            out("x20") _,
            clobber_abi("C"),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    call(arg);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered() -> libc::stack_t {
        // SAFETY: stack_t is plain data.
        let mut ss: libc::stack_t = unsafe { core::mem::zeroed() };
        // SAFETY: a query into a valid out-pointer.
        let queried = unsafe { libc::sigaltstack(core::ptr::null(), &mut ss) };
        assert_eq!(queried, 0);
        ss
    }

    fn unregister() {
        let off = libc::stack_t {
            ss_sp: core::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: turning this thread's alternate stack off (no handler runs on it now).
        assert_eq!(unsafe { libc::sigaltstack(&off, core::ptr::null_mut()) }, 0);
    }

    #[test]
    fn a_thread_gets_a_registered_stack_of_ours_that_runs_the_walk_and_is_released() {
        std::thread::spawn(|| {
            // The test harness's threads come with one of Rust's own: a program thread has none.
            unregister();
            assert!(ours().is_none());
            ensure_for_this_thread();
            let (low, high) = ours().expect("a stack of ours");
            let ss = registered();
            assert_eq!(ss.ss_sp as usize, low);
            assert_eq!(ss.ss_size, high - low);
            assert_eq!(ss.ss_flags & libc::SS_DISABLE, 0);
            let mut sp = 0;
            run_on_ours(&mut || sp = stack_pointer());
            assert!(
                (low..high).contains(&sp),
                "{sp:#x} not in {low:#x}..{high:#x}"
            );
            ensure_for_this_thread();
            assert_eq!(ours(), Some((low, high)), "ensured once");
            release_for_this_thread();
            assert!(ours().is_none());
            assert_ne!(registered().ss_flags & libc::SS_DISABLE, 0, "unregistered");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_stack_the_program_registered_is_kept_and_the_walk_still_moves_to_ours() {
        std::thread::spawn(|| {
            let mut theirs = vec![0u8; 16 << 10];
            let ss = libc::stack_t {
                ss_sp: theirs.as_mut_ptr().cast(),
                ss_flags: 0,
                ss_size: theirs.len(),
            };
            // SAFETY: registers memory that outlives its registration (unregistered below).
            assert_eq!(unsafe { libc::sigaltstack(&ss, core::ptr::null_mut()) }, 0);
            ensure_for_this_thread();
            assert_eq!(registered().ss_sp as usize, theirs.as_ptr() as usize);
            let (low, high) = ours().expect("a stack of ours for the walk");
            let mut sp = 0;
            run_on_ours(&mut || sp = stack_pointer());
            assert!((low..high).contains(&sp));
            release_for_this_thread();
            assert_eq!(
                registered().ss_sp as usize,
                theirs.as_ptr() as usize,
                "the program's stack stays registered"
            );
            unregister(); // before the program's stack is freed
        })
        .join()
        .unwrap();
    }
}
