//! The exported names of the hooks written in C (`csrc/wait.c`, `csrc/signal.c`,
//! `csrc/sigwait.c`, `csrc/mprotect.c`, `csrc/fortify.c`). A Rust
//! cdylib exports only Rust items, so each is a naked function of no frame at all that jumps to
//! the C code: a thread force-unwound while inside one (cancelled in `poll`, or leaving a
//! signal handler by `pthread_exit`) meets only C frames.

macro_rules! export {
    ($name:ident => $target:ident) => {
        extern "C" {
            fn $target();
        }

        #[cfg(not(test))]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {}", sym $target);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {}", sym $target);
        }
    };
}

export!(poll => mlprof_poll);
export!(ppoll => mlprof_ppoll);
export!(select => mlprof_select);
export!(pselect => mlprof_pselect);
export!(epoll_wait => mlprof_epoll_wait);
export!(epoll_pwait => mlprof_epoll_pwait);
export!(nanosleep => mlprof_nanosleep);
export!(clock_nanosleep => mlprof_clock_nanosleep);
export!(sigaction => mlprof_sigaction);
export!(signal => mlprof_signal);
export!(bsd_signal => mlprof_bsd_signal);
export!(sysv_signal => mlprof_sysv_signal);
export!(sigprocmask => mlprof_sigprocmask);
export!(pthread_sigmask => mlprof_pthread_sigmask);
export!(sigtimedwait => mlprof_sigtimedwait);
export!(sigwaitinfo => mlprof_sigwaitinfo);
export!(sigwait => mlprof_sigwait);
export!(signalfd => mlprof_signalfd);
export!(read => mlprof_read);
export!(mprotect => mlprof_mprotect);
export!(epoll_pwait2 => mlprof_epoll_pwait2);
export!(__read_chk => mlprof_read_chk);
export!(__poll_chk => mlprof_poll_chk);
export!(__ppoll_chk => mlprof_ppoll_chk);
