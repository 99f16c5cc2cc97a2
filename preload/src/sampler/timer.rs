//! Per-thread CPU-time timers: each thread gets a POSIX timer on its own CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`) that signals that same thread (`SIGEV_THREAD_ID`), so every
//! thread is sampled in proportion to the CPU it burns and idle threads cost nothing. Each
//! expiry re-arms with a randomised interval (uniform in [0.5, 1.5] x mean) against aliasing.
//! Raw syscalls only; safe to call from the signal handler.

use core::sync::atomic::{AtomicU64, Ordering};

/// `sigev_value` of our timers: tells our expiries from anyone else's SIGPROF.
pub const MAGIC: usize = 0x6d6c_7072_6f66; // "mlprof"

/// Mean interval in nanoseconds; 0 = sampling off.
static MEAN_NS: AtomicU64 = AtomicU64::new(0);

/// The calling thread's timer id, or -1 (kept in `local`, as id + 1).
fn timer_id() -> i32 {
    crate::local::with(|l| l.timer.get() as i32 - 1)
}

fn set_timer_id(id: i32) -> i32 {
    crate::local::with(|l| l.timer.replace((id + 1) as u64) as i32 - 1)
}

/// Set the mean sampling interval (before arming any thread).
pub fn set_mean_interval(ns: u64) {
    MEAN_NS.store(ns, Ordering::Relaxed);
}

/// The mean interval, 0 if sampling is off.
pub fn mean_interval() -> u64 {
    MEAN_NS.load(Ordering::Relaxed)
}

/// Create and arm the calling thread's timer (no-op if sampling is off or already armed).
pub fn arm_this_thread() {
    if mean_interval() == 0 || timer_id() >= 0 {
        return;
    }
    // Before the first expiry: the handler runs on a stack of ours.
    super::altstack::ensure_for_this_thread();
    let tid = crate::clock::tid();
    // SAFETY: sigevent is plain data; zeroed is a valid starting value.
    let mut sev: libc::sigevent = unsafe { core::mem::zeroed() };
    sev.sigev_notify = libc::SIGEV_THREAD_ID;
    sev.sigev_signo = libc::SIGPROF;
    sev.sigev_value = libc::sigval {
        sival_ptr: MAGIC as *mut libc::c_void,
    };
    sev.sigev_notify_thread_id = tid as i32;
    let mut id: i32 = -1;
    // SAFETY: the kernel timer_create syscall with valid pointers to a sigevent and an int.
    let r = unsafe {
        libc::syscall(
            libc::SYS_timer_create,
            libc::CLOCK_THREAD_CPUTIME_ID,
            &mut sev,
            &mut id,
        )
    };
    if r != 0 {
        return;
    }
    set_timer_id(id);
    crate::local::with(|l| {
        l.timer_rng
            .set(0x9E37_79B9_7F4A_7C15 ^ (tid as u64) << 17 | 1);
        l.last_cpu_ns.set(thread_cpu_ns());
    });
    fault_share(0);
    rearm();
}

/// Arm the calling thread's timer for the next randomised interval. Returns the interval.
pub fn rearm() -> u64 {
    let id = timer_id();
    let mean = mean_interval();
    if id < 0 || mean == 0 {
        return 0;
    }
    let next = mean / 2 + next_random() % mean.max(1);
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: (next / 1_000_000_000) as libc::time_t,
            tv_nsec: (next % 1_000_000_000) as libc::c_long,
        },
    };
    // SAFETY: timer_settime syscall on our own timer id with a valid itimerspec.
    unsafe {
        libc::syscall(
            libc::SYS_timer_settime,
            id,
            0,
            &spec,
            core::ptr::null_mut::<libc::itimerspec>(),
        )
    };
    next
}

/// CPU nanoseconds this thread used since its previous sample (or since it was armed). Timers
/// expire on scheduler ticks, after their interval: weighting a sample by the interval would
/// undercount by up to a tick per sample, so the thread's CPU clock is read instead.
pub fn cpu_since_last_sample() -> u64 {
    let now = thread_cpu_ns();
    crate::local::with(|l| now.saturating_sub(l.last_cpu_ns.replace(now)))
}

/// Most kernel time one page fault stands for: a 4 KiB page takes about a microsecond, a 2 MiB
/// transparent huge page (numpy asks for them on large arrays) tens to hundreds, with the
/// compaction it may need up to about a millisecond; 250 us was too few for those (a loop of
/// 152 MB copies lost most of its fault time under load). Without a bound, a thread that makes
/// system calls and faults once between two samples had all its kernel time then counted as
/// faults; on a busy machine, where samples are far apart and the kernel time of each call
/// grows (the scheduler runs in it), that was a third of a loop's CPU.
const MAX_FAULT_NS: u64 = 2_000_000;

/// The share (1/10000) of a sample of `weight_ns` that the kernel spent on this thread's page
/// faults since its previous sample: its kernel time then, when page faults happened and the
/// thread did not come back from a system call (whose kernel time is the call's, counted with
/// the code that made it as before), at most [`MAX_FAULT_NS`] a fault. One
/// `getrusage(RUSAGE_THREAD)`; async-signal-safe.
pub fn fault_share(weight_ns: u64) -> u16 {
    // SAFETY: rusage is plain data.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: a valid out-pointer; getrusage is a plain system call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    let kernel = ru.ru_stime.tv_sec as u64 * 1_000_000_000 + ru.ru_stime.tv_usec as u64 * 1000;
    let faults = (ru.ru_minflt + ru.ru_majflt) as u64;
    let (kernel_delta, faults_delta) = crate::local::with(|l| {
        (
            kernel.saturating_sub(l.last_kernel_ns.replace(kernel)),
            faults.saturating_sub(l.last_faults.replace(faults)),
        )
    });
    if faults_delta == 0 || weight_ns == 0 {
        return 0;
    }
    let faulting = kernel_delta.min(faults_delta.saturating_mul(MAX_FAULT_NS));
    (faulting.min(weight_ns) * 10_000 / weight_ns) as u16
}

/// The calling thread's CPU time (user + system) in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Send the CPU time the calling thread used since its last sample, as a tail sample
/// ([`mlprof_wire::sample_flags::TAIL`]), when it or its process ends. Nothing when its timer
/// is not armed, or while it blocks SIGPROF (that span is reported as such). A signal taking a
/// sample meanwhile takes its own share of the clock: nothing is counted twice.
pub fn send_tail() {
    if timer_id() < 0 || crate::local::with(|l| l.sigprof_blocked.get() != 0) {
        return;
    }
    let weight_ns = cpu_since_last_sample();
    if weight_ns == 0 {
        return;
    }
    let tail = mlprof_wire::Sample {
        ip: 0,
        weight_ns,
        depth: 0,
        flags: mlprof_wire::sample_flags::TAIL,
        fault_share: 0,
        tstate: 0,
        caller: 0,
    };
    crate::channel::send(&mlprof_wire::Record::sample(
        crate::clock::tid(),
        crate::clock::monotonic_ns(),
        tail,
    ));
}

/// Delete the calling thread's timer (thread exit).
pub fn disarm_this_thread() {
    let id = set_timer_id(-1);
    if id >= 0 {
        // SAFETY: deleting our own timer id.
        unsafe { libc::syscall(libc::SYS_timer_delete, id) };
    }
}

/// After fork: the child inherits no timers, but does inherit this thread's TLS.
pub fn forget_this_thread() {
    set_timer_id(-1);
}

fn next_random() -> u64 {
    crate::local::with(|l| {
        let mut x = l.timer_rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        l.timer_rng.set(x);
        x
    })
}
