//! The SIGPROF handler: on each expiry of this thread's CPU timer, record the interrupted
//! instruction pointer and the thread's Python stack, then re-arm. Signals that are not ours
//! go to the handler that was installed before us.
//!
//! Runs inside a signal handler: no allocation, no locks, errno saved and restored.

use core::sync::atomic::{AtomicUsize, Ordering};

use mlprof_wire::{Record, Sample};

use super::timer;
use crate::python::stack;

static PREVIOUS_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);

static PREVIOUS_FLAGS: AtomicUsize = AtomicUsize::new(0);

/// The program sets SIGPROF's disposition (`sigaction`, through our hook): while we sample, our
/// handler stays installed and the program's (a handler, `SIG_DFL`, `SIG_IGN`) becomes the one
/// chained to for SIGPROFs that are not ours (its own `setitimer`, a `kill`); what it asks for
/// the previous disposition is its own. Returns 1 when it took the call, 0 to let it through
/// (not sampling). A program that resets SIGPROF to its default used to be killed by our next
/// timer signal.
pub extern "C" fn program_sigprof(
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    if !INSTALLED.load(Ordering::Relaxed) || timer::mean_interval() == 0 {
        return 0;
    }
    // A vfork child (CPython's subprocess resets every handler before its exec) has signal
    // dispositions of its own but its parent's memory: it sets its own, and must not change
    // what its parent's program asked for.
    if crate::channel::ring().is_some_and(|r| crate::lifecycle::in_vfork_child(r.header())) {
        return 0;
    }
    // `act` and `old` may be the same struct: read it first.
    // SAFETY: the caller's pointers, valid for a sigaction when not null.
    let new = (!act.is_null()).then(|| unsafe { *act });
    if !old.is_null() {
        // SAFETY: as above; zeroed is a valid sigaction, filled with the program's own.
        unsafe {
            let mut mine: libc::sigaction = core::mem::zeroed();
            mine.sa_sigaction = PREVIOUS_HANDLER.load(Ordering::Relaxed);
            mine.sa_flags = PREVIOUS_FLAGS.load(Ordering::Relaxed) as libc::c_int;
            libc::sigemptyset(&mut mine.sa_mask);
            *old = mine;
        }
    }
    if let Some(new) = new {
        PREVIOUS_HANDLER.store(new.sa_sigaction, Ordering::Relaxed);
        PREVIOUS_FLAGS.store(new.sa_flags as usize, Ordering::Relaxed);
    }
    1
}

/// Whether our handler is installed.
static INSTALLED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Install the handler (once, at load time), remembering the previous one for chaining.
pub fn install() -> bool {
    // SAFETY: sigaction is plain data; zeroed then filled.
    let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
    action.sa_sigaction = on_sigprof as *const () as usize;
    // SA_ONSTACK: never on the interrupted stack, below whose pointer JIT code may keep live
    // data (oneDNN in JAX and TensorFlow); each sampled thread has a stack of ours
    // (`altstack`), and the walk runs there even when the program registered a smaller one.
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    // SAFETY: a valid sigaction and out-pointer; SIGPROF is a valid signal.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: as above; sa_mask is emptied before use.
    let ok = unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGPROF, &action, &mut old) == 0
    };
    if ok {
        PREVIOUS_HANDLER.store(old.sa_sigaction, Ordering::Relaxed);
        PREVIOUS_FLAGS.store(old.sa_flags as usize, Ordering::Relaxed);
        INSTALLED.store(true, Ordering::Relaxed);
    }
    ok
}

extern "C" fn on_sigprof(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let ours = !info.is_null()
        && unsafe {
            (*info).si_code == libc::SI_TIMER
                && (*info).si_value().sival_ptr as usize == timer::MAGIC
        };
    let errno = crate::errno::Saved::new();
    if ours && crate::channel::collector_gone() {
        // The run this process was profiled for has ended (it outlived it): stop sampling.
        crate::memory::sampler::configure(0, 0);
        timer::disarm_this_thread();
    } else if ours {
        crate::local::with(|l| l.taken.set(l.taken.get().wrapping_add(1)));
        let ((ip, sp), weight) = (interrupted(context), timer::cpu_since_last_sample());
        let faults = timer::fault_share(weight);
        super::altstack::run_on_ours(&mut || {
            let faults = if faults > 0 && after_syscall(ip) {
                0
            } else {
                faults
            };
            sample(ip, weight, super::caller::of(ip, sp), faults);
        });
        timer::rearm();
    } else {
        chain(sig, info, context);
    }
    drop(errno);
}

/// Record one sample of the calling thread (`caller`: the return address into whoever called
/// libc or libm, when the sample is in one of them; else 0).
fn sample(ip: usize, weight_ns: u64, caller: u64, fault_share: u16) {
    // Inside a CUDA call that waits for the GPU: the CPU it spends there is GPU wait.
    let gpu = match crate::local::with(|l| l.gpu_waiting.get()) {
        0 => 0,
        _ => mlprof_wire::sample_flags::GPU_WAIT,
    };
    stack::send(stack::Reads::Checked, |tid, ts_ns, stack| {
        let sample = Sample {
            ip: ip as u64,
            weight_ns,
            depth: stack.depth as u32,
            flags: stack.flags | gpu,
            tstate: stack.tstate as u64,
            caller,
            fault_share,
        };
        Record::sample(tid, ts_ns, sample)
    });
}

/// The interrupted instruction and stack pointers (0, 0 without a context).
fn interrupted(context: *mut libc::c_void) -> (usize, usize) {
    if context.is_null() {
        return (0, 0);
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: for SA_SIGINFO handlers the third argument is the interrupted ucontext.
        let regs = unsafe { &(*(context as *const libc::ucontext_t)).uc_mcontext.gregs };
        let reg = |r: libc::c_int| regs.get(r as usize).map_or(0, |&v| v as usize);
        (reg(libc::REG_RIP), reg(libc::REG_RSP))
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: as above.
        let m = unsafe { &(*(context as *const libc::ucontext_t)).uc_mcontext };
        (m.pc as usize, m.sp as usize)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        (0, 0)
    }
}

/// Whether the thread was interrupted right after a system call instruction (its kernel time
/// then is the call's). Read through the kernel; false when unreadable.
fn after_syscall(ip: usize) -> bool {
    use mlprof_pyframes::Memory;
    if ip < 4 || !crate::python::read::checked() {
        return false;
    }
    let mut b = [0u8; 4];
    if crate::python::read::Direct.bytes(ip - 4, &mut b).is_none() {
        return false;
    }
    if cfg!(target_arch = "aarch64") {
        u32::from_le_bytes(b) & 0xffe0_001f == 0xd400_0001 // svc #imm
    } else {
        b[2..] == [0x0f, 0x05] // syscall
    }
}

/// Pass a SIGPROF that is not ours to whoever had SIGPROF before us.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let handler = PREVIOUS_HANDLER.load(Ordering::Relaxed);
    let flags = PREVIOUS_FLAGS.load(Ordering::Relaxed) as libc::c_int;
    match handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // The default action of SIGPROF is to terminate: do exactly that.
            // SAFETY: restoring the default disposition and re-raising; both are
            // async-signal-safe.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        }
        f if flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this type.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { core::mem::transmute(f) };
            f(sig, info, context);
        }
        f => {
            // SAFETY: a plain `void (*)(int)` handler.
            let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(f) };
            f(sig);
        }
    }
}
