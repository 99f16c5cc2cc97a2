//! mlprof's per-thread state in one thread-local, so that a hook looks it up once: the
//! reentrancy guard, the allocation and copy sampling countdowns, the random generator, and the
//! CPU sampler's timer. Everything the signal handler and the hooks touch per thread is here:
//! Rust's `thread_local!` in a shared library goes through `__tls_get_addr`, which after a
//! `dlopen` may grow the thread's TLS vector with `malloc`, deadlocking (or corrupting the heap)
//! when the signal interrupted `malloc`.
//! The storage is an initial-exec TLS block defined in C (`csrc/local.c`): one `%fs`-relative
//! load, no call to `__tls_get_addr`, no lazy initialisation, no destructor, no allocation;
//! usable while the thread is being torn down. Zero-initialised: zero means "not drawn yet".

use core::cell::Cell;

/// The calling thread's state (at most 256 bytes, all-zero to start).
#[repr(C)]
pub struct Local {
    busy: Cell<u64>,
    /// Bytes left before the next allocation sample (0: not drawn yet).
    pub alloc_left: Cell<i64>,
    /// Bytes left before the next copy sample (0: not drawn yet).
    pub copy_left: Cell<i64>,
    /// xorshift state (0: not seeded yet).
    pub rng: Cell<u64>,
    /// The CPU sampler's timer id + 1 (0: none).
    pub timer: Cell<u64>,
    /// The thread's CPU clock at its last sample (ns).
    pub last_cpu_ns: Cell<u64>,
    /// The sampler's xorshift state for its intervals.
    pub timer_rng: Cell<u64>,
    /// Our sampling signals handled on this thread.
    pub taken: Cell<u64>,
    /// CLOCK_MONOTONIC (ns) at which the thread entered a wait it times itself (0: none). The
    /// collector reads it from outside (its address goes out with the thread-start record) to
    /// leave such a wait out of its own looks.
    pub waiting_since: Cell<u64>,
    /// The thread's CPU clock (ns) when it entered its timed wait.
    pub wait_cpu_ns: Cell<u64>,
    /// Nanoseconds of timed waits too short to send alone, carried into the thread's next one.
    pub short_waits: Cell<u64>,
    /// The base of this thread's signal stack of ours (guard page included; 0: none).
    pub altstack: Cell<u64>,
    /// The thread's kernel CPU time (ns) and page faults at its last sample.
    pub last_kernel_ns: Cell<u64>,
    pub last_faults: Cell<u64>,
    /// 1 while the thread blocks SIGPROF (as last noted in the channel).
    pub sigprof_blocked: Cell<u64>,
    /// 1 while the thread is inside a CUDA call that waits for the GPU: its CPU samples are
    /// flagged as GPU wait (`crate::gpu`).
    pub gpu_waiting: Cell<u64>,
    /// Nanoseconds of GPU waits too short to send alone, carried into the thread's next one.
    pub gpu_short_waits: Cell<u64>,
    /// Kernel launches left before the next launch sample (0: not drawn yet).
    pub launch_left: Cell<i64>,
    /// CUDA calls of ours the thread is inside (a runtime calling its own exported functions
    /// is seen once, by the outermost).
    pub cuda_calls: Cell<u64>,
    /// The thread's CPU clock (ns) when it blocked SIGPROF.
    pub sigprof_block_cpu_ns: Cell<u64>,
    /// Free-threaded builds: heap bytes this thread's Python allocations and frees changed
    /// and that are not in the shared counters yet (`memory/free_threaded.rs`).
    pub heap_pending: Cell<i64>,
}

const _: () = assert!(core::mem::size_of::<Local>() <= 256 && core::mem::align_of::<Local>() <= 16);
// `csrc/local.c`'s `mlprof_signals_taken` (read by the C wait hooks) reads the eighth u64.
const _: () = assert!(core::mem::offset_of!(Local, taken) == 7 * 8);

extern "C" {
    /// This thread's 256-byte, 16-aligned, zero-initialised state block (the accessor, where
    /// [`block`] has no inline sequence).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn mlprof_local() -> *mut core::ffi::c_void;
}

/// Run `f` with this thread's state.
#[inline]
pub fn with<R>(f: impl FnOnce(&Local) -> R) -> R {
    // SAFETY: `mlprof_local` returns this thread's own block, valid for the thread's lifetime,
    // large and aligned enough for `Local` (checked above); all-zero bytes are a valid `Local`
    // (integers in Cells); only this thread ever touches it, and a signal handler that
    // interrupts `f` on this thread sees it through the same Cells (no references escape).
    f(unsafe { &*(block() as *const Local) })
}

/// This thread's block: on x86-64 the initial-exec access sequence inlined here (the thread
/// pointer plus the block's offset, from the GOT), with no call; elsewhere the C accessor.
#[inline(always)]
fn block() -> *mut core::ffi::c_void {
    #[cfg(target_arch = "x86_64")]
    {
        let p: *mut core::ffi::c_void;
        // SAFETY: the initial-exec TLS access the C compiler emits for `mlprof_local_state`
        // (csrc/local.c, hidden, initial-exec): `%fs:0` is the thread pointer, and the GOT
        // entry holds the block's offset from it. Reads only; no stack use.
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr fs:[0]",
                "add {p}, qword ptr [rip + mlprof_local_state@GOTTPOFF]",
                p = out(reg) p,
                options(pure, readonly, nostack),
            );
        }
        p
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the C accessor of the same block.
    unsafe {
        mlprof_local()
    }
}

/// Proof that this thread is inside mlprof (or inside the allocator our wrapper called);
/// released on drop. Hooks that cannot enter only count and forward.
pub struct Entered<'a>(&'a Local, u64);

impl Local {
    /// Enter mlprof on this thread, or `None` if it is already inside.
    #[inline]
    pub fn enter(&self) -> Option<Entered<'_>> {
        // Not `then_some`: its argument is built either way, and dropping that guard would
        // mark the thread not busy while the outer one still holds it.
        if self.busy.replace(1) == 0 {
            Some(Entered(self, 0))
        } else {
            None
        }
    }

    /// Mark the thread busy whatever it was; dropping restores the previous state.
    #[inline]
    pub fn hold(&self) -> Entered<'_> {
        Entered(self, self.busy.replace(1))
    }

    /// Whether the thread is inside mlprof.
    #[inline]
    pub fn busy(&self) -> bool {
        self.busy.get() != 0
    }
}

impl Entered<'_> {
    /// Whether the thread was not busy before this guard (it is the outermost).
    #[inline]
    pub fn was_free(&self) -> bool {
        self.1 == 0
    }
}

impl Drop for Entered<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.busy.set(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::with;

    #[test]
    fn entering_is_not_reentrant_and_holding_restores() {
        with(|l| {
            let outer = l.enter();
            assert!(outer.is_some() && l.busy());
            assert!(l.enter().is_none());
            assert!(l.busy(), "a refused entry leaves the thread inside");
            {
                let _held = l.hold();
                assert!(l.enter().is_none());
            }
            assert!(l.busy(), "nor does a hold inside an entry end it");
            drop(outer);
            assert!(!l.busy());
            {
                let _held = l.hold();
                assert!(l.busy());
            }
            assert!(!l.busy());
        });
    }
}
