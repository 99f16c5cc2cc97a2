//! The SIGPROF handler: on each expiry of this thread's CPU timer, record the interrupted
//! instruction pointer and the thread's Python stack, then re-arm. Signals that are not ours
//! go to the handler that was installed before us.
//!
//! Runs inside a signal handler: no allocation, no locks, errno saved and restored.

use core::sync::atomic::{AtomicUsize, Ordering};

use mlprof_wire::{sample_flags, Kind, Record, FRAMES_PER_RECORD};

use super::timer;
use mlprof_pyframes::walk;

use crate::python::{codes, read, runtime};
use crate::{channel, clock};

/// Deepest Python stack recorded per sample (innermost frames kept).
const MAX_DEPTH: usize = 128;

static PREVIOUS_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);

std::thread_local! {
    /// Our signals handled on this thread (the EINTR hooks compare it around a wait).
    static TAKEN: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// How many of our sampling signals this thread has handled.
pub fn signals_taken() -> u32 {
    TAKEN.with(|t| t.get())
}
static PREVIOUS_FLAGS: AtomicUsize = AtomicUsize::new(0);

/// Install the handler (once, at load time), remembering the previous one for chaining.
pub fn install() -> bool {
    // SAFETY: sigaction is plain data; zeroed then filled.
    let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
    action.sa_sigaction = on_sigprof as *const () as usize;
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
    let errno = Errno::save();
    if ours {
        TAKEN.with(|t| t.set(t.get().wrapping_add(1)));
        sample(instruction_pointer(context), timer::cpu_since_last_sample());
        timer::rearm();
    } else {
        chain(sig, info, context);
    }
    errno.restore();
}

/// Record one sample of the calling thread.
fn sample(ip: usize, weight_ns: u64) {
    let Some(ring) = channel::ring() else { return };
    let mut frames = [walk::Frame::default(); MAX_DEPTH];
    let rt = runtime::get();
    let tstate = rt.map_or(0, |rt| rt.this_thread_state());
    let mut flags = 0;
    let mut depth = 0;
    if let (Some(rt), true) = (rt, tstate != 0) {
        let w = walk::walk(&read::Direct, &rt.interpreter(), tstate, &mut frames);
        depth = w.depth;
        flags |= if w.truncated {
            sample_flags::TRUNCATED
        } else {
            0
        };
        flags |= if w.failed {
            sample_flags::WALK_FAILED
        } else {
            0
        };
    } else {
        flags |= sample_flags::NO_PYTHON;
    }
    let mut words = [0u64; MAX_DEPTH];
    for (word, frame) in words.iter_mut().zip(&frames[..depth]) {
        let id = rt.map_or(mlprof_wire::UNKNOWN_CODE, |rt| {
            codes::id(&rt, &ring, frame.code)
        });
        *word = (id as u64) << 32 | frame.lasti as u32 as u64;
    }
    let frame_records = depth.div_ceil(FRAMES_PER_RECORD);
    let Some(group) = ring.reserve(1 + frame_records as u64) else {
        return;
    };
    let tid = clock::tid();
    let mut head = Record::new(Kind::Sample, tid, clock::monotonic_ns());
    head.a = ip as u64;
    head.b = weight_ns;
    head.c = depth as u64 | (flags as u64) << 32;
    head.d = tstate as u64;
    group.set(0, &head);
    for (i, chunk) in words[..depth].chunks(FRAMES_PER_RECORD).enumerate() {
        let mut rec = Record::new(Kind::Frames, tid, 0);
        let mut packed = [0u64; FRAMES_PER_RECORD];
        packed[..chunk.len()].copy_from_slice(chunk);
        (rec.a, rec.b, rec.c, rec.d, rec.e) =
            (packed[0], packed[1], packed[2], packed[3], packed[4]);
        group.set(1 + i as u64, &rec);
    }
}

fn instruction_pointer(context: *mut libc::c_void) -> usize {
    if context.is_null() {
        return 0;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: for SA_SIGINFO handlers the third argument is the interrupted ucontext.
        unsafe {
            (*(context as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RIP as usize]
                as usize
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: as above.
        unsafe { (*(context as *const libc::ucontext_t)).uc_mcontext.pc as usize }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        0
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

/// errno, saved on entry to the handler and restored on exit.
struct Errno(libc::c_int);

impl Errno {
    fn save() -> Errno {
        // SAFETY: __errno_location returns this thread's errno slot.
        Errno(unsafe { *libc::__errno_location() })
    }

    fn restore(self) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = self.0 };
    }
}
