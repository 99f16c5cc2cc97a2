/* The signals mlprof forwards to the program (SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2,
 * SIGTERM): when the program installs a handler for one, the handler is wrapped so that its
 * receipt is noted in the channel first. A signal sent to the whole process group (a job
 * scheduler, `timeout`, `kill -- -PGID`) reaches the program and mlprof at once, and mlprof
 * must not forward it a second time: the note tells it the program already has it.
 *
 * Exactly as without us: the user's handler runs with the arguments, mask and flags it asked
 * for, and `sigaction` reports the user's handler and flags back, never the wrapper. C, not
 * Rust: a handler may leave by siglongjmp or pthread_exit, and no frame of this panic = "abort"
 * library may be on the stack then (the note itself returns before the handler runs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef int (*sigmask_fn)(int, const sigset_t *, sigset_t *);
extern int __sigaction(int, const struct sigaction *, struct sigaction *);

static sigaction_fn real_sigaction;
/* Notes the receipt of a signal (set by the Rust side once the channel exists). */
static void (*note)(int);
/* Takes the program's SIGPROF disposition while mlprof samples (returns 1 when it did). */
static int (*sigprof_user)(const struct sigaction *, struct sigaction *);
static sigmask_fn real_sigprocmask, real_pthread_sigmask;
/* Notes that this thread now blocks SIGPROF (1) or not (0). */
static void (*sigprof_masked)(int);
/* The user's handler (sa_handler or sa_sigaction) and whether it takes siginfo, by signal. */
static void *user_handler[32];
static int user_siginfo[32];

static int forwarded(int sig) {
    return sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGUSR1 || sig == SIGUSR2 ||
           sig == SIGTERM;
}

/* Load time: the real sigaction, and the function that notes a receipt. */
HIDDEN void mlprof_signals_init(void (*note_fn)(int),
                                int (*sigprof_fn)(const struct sigaction *, struct sigaction *),
                                void (*masked_fn)(int)) {
    __atomic_store_n(&real_sigaction, (sigaction_fn)dlsym(RTLD_NEXT, "sigaction"), __ATOMIC_RELEASE);
    __atomic_store_n(&real_sigprocmask, (sigmask_fn)dlsym(RTLD_NEXT, "sigprocmask"), __ATOMIC_RELEASE);
    __atomic_store_n(&real_pthread_sigmask, (sigmask_fn)dlsym(RTLD_NEXT, "pthread_sigmask"),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&sigprof_masked, masked_fn, __ATOMIC_RELEASE);
    __atomic_store_n(&note, note_fn, __ATOMIC_RELEASE);
    __atomic_store_n(&sigprof_user, sigprof_fn, __ATOMIC_RELEASE);
}

/* The program took `sig` without a handler (sigwait, signalfd: sigwait.c): noted as the
 * wrapper notes a handler's receipt, for the signals mlprof forwards. */
HIDDEN void mlprof_note_signal(int sig) {
    void (*note_fn)(int) = __atomic_load_n(&note, __ATOMIC_ACQUIRE);
    if (note_fn && sig > 0 && sig < 32 && forwarded(sig))
        note_fn(sig);
}

static void wrapper(int sig, siginfo_t *info, void *context) {
    void *handler = __atomic_load_n(&user_handler[sig], __ATOMIC_ACQUIRE);
    void (*note_fn)(int) = __atomic_load_n(&note, __ATOMIC_ACQUIRE);
    if (note_fn)
        note_fn(sig);
    if (handler == (void *)SIG_DFL || handler == (void *)SIG_IGN)
        return;
    if (__atomic_load_n(&user_siginfo[sig], __ATOMIC_ACQUIRE))
        ((void (*)(int, siginfo_t *, void *))handler)(sig, info, context);
    else
        ((void (*)(int))handler)(sig);
}

static int call_real(int sig, const struct sigaction *act, struct sigaction *old) {
    sigaction_fn f = __atomic_load_n(&real_sigaction, __ATOMIC_ACQUIRE);
    return f ? f(sig, act, old) : __sigaction(sig, act, old);
}

HIDDEN int mlprof_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    struct sigaction mine;
    void *previous, *handler;
    int previous_siginfo, r;
    int (*prof)(const struct sigaction *, struct sigaction *) =
        __atomic_load_n(&sigprof_user, __ATOMIC_ACQUIRE);
    /* SIGPROF carries mlprof's samples: the program's handler (or SIG_DFL, SIG_IGN) is kept
     * to chain to, and reported back, while ours stays installed. */
    if (sig == SIGPROF && prof && prof(act, old))
        return 0;
    if (sig <= 0 || sig >= 32 || !forwarded(sig) || !__atomic_load_n(&note, __ATOMIC_ACQUIRE))
        return call_real(sig, act, old);
    previous = __atomic_load_n(&user_handler[sig], __ATOMIC_ACQUIRE);
    previous_siginfo = __atomic_load_n(&user_siginfo[sig], __ATOMIC_ACQUIRE);
    if (act) {
        mine = *act; /* `act` and `old` may be the same struct */
        handler = (mine.sa_flags & SA_SIGINFO) ? (void *)mine.sa_sigaction : (void *)mine.sa_handler;
        if (handler != (void *)SIG_DFL && handler != (void *)SIG_IGN) {
            __atomic_store_n(&user_siginfo[sig], (mine.sa_flags & SA_SIGINFO) != 0, __ATOMIC_RELEASE);
            __atomic_store_n(&user_handler[sig], handler, __ATOMIC_RELEASE);
            mine.sa_sigaction = wrapper;
            mine.sa_flags |= SA_SIGINFO;
        }
        r = call_real(sig, &mine, old);
    } else {
        r = call_real(sig, NULL, old);
    }
    if (r == 0 && old && old->sa_sigaction == wrapper) {
        /* Report what the user installed, not our wrapper. */
        if (previous_siginfo) {
            old->sa_sigaction = (void (*)(int, siginfo_t *, void *))previous;
        } else {
            old->sa_handler = (void (*)(int))previous;
            old->sa_flags &= ~SA_SIGINFO;
        }
    }
    return r;
}

/* glibc's `signal` (BSD semantics, also exported as `bsd_signal`) and `sysv_signal` install
 * through glibc's internal sigaction, which the exported `sigaction` above never sees: a C
 * program's `signal(SIGPROF, SIG_DFL)` would replace mlprof's sampling handler (our next
 * timer signal then kills it), and a forwarded signal's handler would go unwrapped. They are
 * made here, through `mlprof_sigaction`, with the flags glibc gives them. One difference:
 * glibc leaves out SA_RESTART for a signal given to `siginterrupt(sig, 1)`, a set we cannot
 * read; such a program's handler restarts system calls under mlprof. */
static sighandler_t via_sigaction(int sig, sighandler_t handler, int flags, int mask_self) {
    struct sigaction act, old;
    if (handler == SIG_ERR || sig <= 0 || sig >= NSIG) {
        errno = EINVAL;
        return SIG_ERR;
    }
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (mask_self && sigaddset(&act.sa_mask, sig) < 0)
        return SIG_ERR;
    act.sa_flags = flags;
    if (mlprof_sigaction(sig, &act, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}

HIDDEN sighandler_t mlprof_signal(int sig, sighandler_t handler) {
    return via_sigaction(sig, handler, SA_RESTART, 1);
}

HIDDEN sighandler_t mlprof_bsd_signal(int sig, sighandler_t handler) {
    return via_sigaction(sig, handler, SA_RESTART, 1);
}

HIDDEN sighandler_t mlprof_sysv_signal(int sig, sighandler_t handler) {
    return via_sigaction(sig, handler, SA_RESETHAND | SA_NODEFER, 0);
}

/* `sigprocmask` and `pthread_sigmask`: the program's call, unchanged; when it blocked or
 * unblocked SIGPROF on this thread, mlprof notes it. A thread that blocks SIGPROF gets mlprof's
 * timer signals only once it unblocks it (all of its CPU time meanwhile then lands on that one
 * sample), or never: the report says which threads did, and from when. Changing the program's
 * mask instead would hand it, or its signalfd, SIGPROFs it did not ask for. */
static void after_mask(int how, const sigset_t *set) {
    void (*f)(int) = __atomic_load_n(&sigprof_masked, __ATOMIC_ACQUIRE);
    if (!f || !set || sigismember(set, SIGPROF) != 1) {
        if (f && set && how == SIG_SETMASK)
            f(0);
        return;
    }
    if (how == SIG_BLOCK || how == SIG_SETMASK)
        f(1);
    else if (how == SIG_UNBLOCK)
        f(0);
}

/* Before `mlprof_signals_init` (another library's constructor): the system call itself, with
 * glibc's two internal signals (32, 33: thread cancellation and set*id) left unblocked as
 * glibc leaves them. Returns an errno value. */
static int raw_mask(int how, const sigset_t *set, sigset_t *old) {
    sigset_t copy;
    if (set) {
        copy = *set;
        copy.__val[0] &= ~(3UL << 31);
        set = &copy;
    }
    return syscall(SYS_rt_sigprocmask, how, set, old, _NSIG / 8) == 0 ? 0 : errno;
}

HIDDEN int mlprof_sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    sigmask_fn f = __atomic_load_n(&real_sigprocmask, __ATOMIC_ACQUIRE);
    int r, e;
    if (f) {
        r = f(how, set, old);
    } else {
        e = raw_mask(how, set, old);
        if (e)
            errno = e;
        r = e ? -1 : 0;
    }
    if (r == 0) {
        e = errno;
        after_mask(how, set);
        errno = e;
    }
    return r;
}

HIDDEN int mlprof_pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    sigmask_fn f = __atomic_load_n(&real_pthread_sigmask, __ATOMIC_ACQUIRE);
    int r = f ? f(how, set, old) : raw_mask(how, set, old), e;
    if (r == 0) {
        e = errno;
        after_mask(how, set);
        errno = e;
    }
    return r;
}

/* Whether this thread blocks SIGPROF now (a thread inherits its creator's mask). */
HIDDEN int mlprof_sigprof_blocked(void) {
    sigset_t now;
    if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &now, _NSIG / 8) != 0)
        return 0;
    return sigismember(&now, SIGPROF) == 1;
}
