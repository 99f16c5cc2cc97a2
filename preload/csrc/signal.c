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
#include <signal.h>
#include <stddef.h>

#define HIDDEN __attribute__((visibility("hidden")))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
extern int __sigaction(int, const struct sigaction *, struct sigaction *);

static sigaction_fn real_sigaction;
/* Notes the receipt of a signal (set by the Rust side once the channel exists). */
static void (*note)(int);
/* Takes the program's SIGPROF disposition while mlprof samples (returns 1 when it did). */
static int (*sigprof_user)(const struct sigaction *, struct sigaction *);
/* The user's handler (sa_handler or sa_sigaction) and whether it takes siginfo, by signal. */
static void *user_handler[32];
static int user_siginfo[32];

static int forwarded(int sig) {
    return sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGUSR1 || sig == SIGUSR2 ||
           sig == SIGTERM;
}

/* Load time: the real sigaction, and the function that notes a receipt. */
HIDDEN void mlprof_signals_init(void (*note_fn)(int),
                                int (*sigprof_fn)(const struct sigaction *, struct sigaction *)) {
    __atomic_store_n(&real_sigaction, (sigaction_fn)dlsym(RTLD_NEXT, "sigaction"), __ATOMIC_RELEASE);
    __atomic_store_n(&note, note_fn, __ATOMIC_RELEASE);
    __atomic_store_n(&sigprof_user, sigprof_fn, __ATOMIC_RELEASE);
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
