/* Programs that take signals synchronously: sigwaitinfo, sigtimedwait, sigwait, and signalfd
 * (the signal blocked, then read from a descriptor). Two duties:
 *
 * - A forwarded signal (SIGINT, SIGTERM, ...) the program takes this way is noted, as the
 *   handler wrapper of signal.c notes one a handler takes, so that a signal sent to the whole
 *   process group reaches the program once: mlprof, which got it too, does not send it again.
 *   Descriptors made by signalfd are remembered; a `read` of one notes what it returned.
 * - mlprof's own SIGPROF (its CPU timer, si_code SI_TIMER with mlprof's value) is never
 *   handed to the program: a sigwait on a set holding SIGPROF waits on past it (with the time
 *   left), and signalfd's mask leaves SIGPROF out while mlprof samples (a catch-all signalfd
 *   read mlprof's timer signals as its own). A program that reads its own ITIMER_PROF through
 *   a signalfd gets none under mlprof: it is named in the README's limits.
 *
 * C, not Rust: sigwaitinfo, sigtimedwait, sigwait and read are cancellation points (see
 * wait.c). Everything here is async-signal-safe: no allocation, no locks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* signal.c: note that the program took `sig` (a forwarded one; others are ignored). */
void mlprof_note_signal(int sig);
uint64_t mlprof_deadline_ts(const struct timespec *ts, uint64_t now);
const struct timespec *mlprof_remaining_ts(uint64_t deadline, uint64_t now, struct timespec *out);
int mlprof_timespec_valid(const struct timespec *ts);

typedef int (*sigtimedwait_fn)(const sigset_t *, siginfo_t *, const struct timespec *);
typedef int (*signalfd_fn)(int, const sigset_t *, int);
typedef ssize_t (*read_fn)(int, void *, size_t);

static sigtimedwait_fn real_sigtimedwait;
static signalfd_fn real_signalfd;
static read_fn real_read;

/* Descriptors signalfd returned (a few: programs make one), -1 when free. */
#define SIGNALFDS 16
static int signalfds[SIGNALFDS] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
static int any_signalfd;
/* Whether mlprof's CPU timers run (set at load time), and the value their signals carry. */
static int (*sampling)(void);
static uintptr_t timer_magic;
/* Publishes the signals (bit sig - 1) the program takes without a handler. */
static void (*waits_for)(uint64_t);

static void publish(const sigset_t *set) {
    void (*f)(uint64_t) = __atomic_load_n(&waits_for, __ATOMIC_ACQUIRE);
    uint64_t bits = 0;
    int sig;
    if (!f || !set)
        return;
    for (sig = 1; sig < 32; sig++)
        if (sigismember(set, sig) == 1)
            bits |= 1ull << (sig - 1);
    f(bits);
}

static int mlprof_sampling(void) {
    int (*f)(void) = __atomic_load_n(&sampling, __ATOMIC_ACQUIRE);
    return f && f();
}

HIDDEN void mlprof_sigwait_init(int (*sampling_fn)(void), uintptr_t magic,
                                void (*waits_fn)(uint64_t)) {
    __atomic_store_n(&timer_magic, magic, __ATOMIC_RELAXED);
    __atomic_store_n(&waits_for, waits_fn, __ATOMIC_RELEASE);
    __atomic_store_n(&sampling, sampling_fn, __ATOMIC_RELEASE);
    __atomic_store_n(&real_sigtimedwait, (sigtimedwait_fn)dlsym(RTLD_NEXT, "sigtimedwait"),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&real_signalfd, (signalfd_fn)dlsym(RTLD_NEXT, "signalfd"), __ATOMIC_RELEASE);
    __atomic_store_n(&real_read, (read_fn)dlsym(RTLD_NEXT, "read"), __ATOMIC_RELEASE);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int ours(const siginfo_t *info) {
    return info->si_signo == SIGPROF && info->si_code == SI_TIMER &&
           (uintptr_t)info->si_value.sival_ptr == __atomic_load_n(&timer_magic, __ATOMIC_RELAXED);
}

static int timedwait(const sigset_t *set, siginfo_t *info, const struct timespec *timeout) {
    sigtimedwait_fn f = __atomic_load_n(&real_sigtimedwait, __ATOMIC_ACQUIRE);
    if (f)
        return f(set, info, timeout);
    return (int)syscall(SYS_rt_sigtimedwait, set, info, timeout, _NSIG / 8);
}

/* The one body of the three: waits past mlprof's own SIGPROFs, notes a forwarded signal. */
static int wait_for(const sigset_t *set, siginfo_t *info, const struct timespec *timeout) {
    siginfo_t mine;
    struct timespec left;
    const struct timespec *ask = timeout;
    uint64_t deadline;
    int sig;
    if (!info)
        info = &mine;
    publish(set);
    if (!set || sigismember(set, SIGPROF) != 1 || !mlprof_sampling() ||
        !mlprof_timespec_valid(timeout)) {
        sig = timedwait(set, info, timeout);
    } else {
        deadline = mlprof_deadline_ts(timeout, now_ns());
        for (;;) {
            sig = timedwait(set, info, ask);
            if (sig != SIGPROF || !ours(info))
                break;
            /* Ours: never the program's. Wait on with the time left. */
            ask = mlprof_remaining_ts(deadline, now_ns(), &left);
        }
    }
    if (sig > 0)
        mlprof_note_signal(sig);
    return sig;
}

HIDDEN int mlprof_sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *timeout) {
    return wait_for(set, info, timeout);
}

HIDDEN int mlprof_sigwaitinfo(const sigset_t *set, siginfo_t *info) {
    return wait_for(set, info, NULL);
}

/* sigwait returns an error number rather than setting errno, and never fails with EINTR. */
HIDDEN int mlprof_sigwait(const sigset_t *set, int *sig) {
    int saved = errno, r;
    do
        r = wait_for(set, NULL, NULL);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        r = errno;
        errno = saved;
        return r;
    }
    errno = saved;
    *sig = r;
    return 0;
}

static void remember(int fd) {
    int i, free = -1;
    for (i = 0; i < SIGNALFDS; i++) {
        int have = __atomic_load_n(&signalfds[i], __ATOMIC_RELAXED);
        if (have == fd)
            return;
        if (have < 0 && free < 0)
            free = i;
    }
    /* Full (closed ones are not told apart here): the oldest numbers give way. */
    if (free < 0)
        free = fd % SIGNALFDS;
    __atomic_store_n(&signalfds[free], fd, __ATOMIC_RELAXED);
    __atomic_store_n(&any_signalfd, 1, __ATOMIC_RELEASE);
}

HIDDEN int mlprof_signalfd(int fd, const sigset_t *mask, int flags) {
    signalfd_fn f = __atomic_load_n(&real_signalfd, __ATOMIC_ACQUIRE);
    sigset_t without;
    int r;
    if (mask && mlprof_sampling() && sigismember(mask, SIGPROF) == 1) {
        without = *mask;
        sigdelset(&without, SIGPROF);
        mask = &without;
    }
    r = f ? f(fd, mask, flags) : (int)syscall(SYS_signalfd4, fd, mask, _NSIG / 8, flags);
    if (r >= 0) {
        int saved = errno;
        publish(mask);
        remember(r);
        errno = saved;
    }
    return r;
}

/* Whether `fd` is one signalfd returned, and still is one (it may have been closed and its
 * number reused for a file since: the link of /proc/self/fd/N says). */
static int is_signalfd(int fd) {
    char path[32], target[32];
    ssize_t n;
    int i, found = 0, k;
    for (i = 0; i < SIGNALFDS && !found; i++)
        found = __atomic_load_n(&signalfds[i], __ATOMIC_RELAXED) == fd;
    if (!found)
        return 0;
    memcpy(path, "/proc/self/fd/", 14);
    k = 14;
    {
        char digits[12];
        int d = 0, v = fd;
        do
            digits[d++] = (char)('0' + v % 10);
        while ((v /= 10) > 0 && d < 11);
        while (d > 0)
            path[k++] = digits[--d];
    }
    path[k] = 0;
    n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = 0;
    return strcmp(target, "anon_inode:[signalfd]") == 0;
}

HIDDEN ssize_t mlprof_read(int fd, void *buf, size_t count) {
    read_fn f = __atomic_load_n(&real_read, __ATOMIC_ACQUIRE);
    ssize_t r = f ? f(fd, buf, count) : syscall(SYS_read, fd, buf, count);
    if (r >= (ssize_t)sizeof(struct signalfd_siginfo) &&
        __atomic_load_n(&any_signalfd, __ATOMIC_ACQUIRE)) {
        int saved = errno;
        if (is_signalfd(fd)) {
            const struct signalfd_siginfo *si = buf;
            ssize_t i, n = r / (ssize_t)sizeof *si;
            for (i = 0; i < n; i++)
                mlprof_note_signal((int)si[i].ssi_signo);
        }
        errno = saved;
    }
    return r;
}
