/* Blocking waits that a signal interrupts with EINTR even under SA_RESTART: poll, ppoll,
 * select, pselect, epoll_wait, epoll_pwait, epoll_pwait2, nanosleep, clock_nanosleep (and, in
 * fortify.c, the _FORTIFY_SOURCE entry points of poll and ppoll). Native libraries often
 * treat that EINTR as an error, so when our own sampling signal (and only ours) interrupted the
 * call, it is made again with the time that was left. EINTR caused by anything else is returned
 * as is.
 *
 * A timeout the kernel refuses (a negative part, tv_nsec of 1e9 or more) is passed on unchanged,
 * so that the call fails with EINVAL at once as without us; negative poll and epoll timeouts
 * (forever), select's timeval and the sleeps' timespecs are passed on as they are anyway.
 *
 * A call that may block (its timeout is not zero; a sleep always) is also timed:
 * mlprof_wait_begin before it, mlprof_wait_end after it (src/hooks/wait.rs), which send the time
 * it kept the calling Python thread off the CPU as a waiting sample of its stack.
 *
 * C, not Rust: these are cancellation points. A thread cancelled (or ended by pthread_exit from
 * a signal handler) while blocked here is force-unwound through this frame, and an unwind
 * through a Rust frame of this panic = "abort" library aborts the program. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

#define HIDDEN __attribute__((visibility("hidden")))

uint64_t mlprof_signals_taken(void);
uint64_t mlprof_wait_begin(void);
void mlprof_wait_end(uint64_t since);

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);
typedef int (*ppoll_fn)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
typedef int (*select_fn)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
typedef int (*pselect_fn)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);
typedef int (*epoll_pwait_fn)(int, struct epoll_event *, int, int, const sigset_t *);
typedef int (*epoll_pwait2_fn)(int, struct epoll_event *, int, const struct timespec *, const sigset_t *);
typedef int (*nanosleep_fn)(const struct timespec *, struct timespec *);
typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

static poll_fn real_poll;
static ppoll_fn real_ppoll;
static select_fn real_select;
static pselect_fn real_pselect;
static epoll_wait_fn real_epoll_wait;
static epoll_pwait_fn real_epoll_pwait;
/* glibc 2.35+; an older one has none, and a program that calls it cannot be one of its. */
static epoll_pwait2_fn real_epoll_pwait2;
static nanosleep_fn real_nanosleep;
static clock_nanosleep_fn real_clock_nanosleep;

/* Resolve the real functions (load time; again lazily if a hook runs before that). */
HIDDEN void mlprof_waits_resolve(void) {
    __atomic_store_n(&real_ppoll, (ppoll_fn)dlsym(RTLD_NEXT, "ppoll"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_select, (select_fn)dlsym(RTLD_NEXT, "select"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_pselect, (pselect_fn)dlsym(RTLD_NEXT, "pselect"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_epoll_wait, (epoll_wait_fn)dlsym(RTLD_NEXT, "epoll_wait"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_epoll_pwait, (epoll_pwait_fn)dlsym(RTLD_NEXT, "epoll_pwait"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_epoll_pwait2, (epoll_pwait2_fn)dlsym(RTLD_NEXT, "epoll_pwait2"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_nanosleep, (nanosleep_fn)dlsym(RTLD_NEXT, "nanosleep"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_clock_nanosleep, (clock_nanosleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_poll, (poll_fn)dlsym(RTLD_NEXT, "poll"), __ATOMIC_RELEASE);
}

static int ready(void) {
    if (!__atomic_load_n(&real_poll, __ATOMIC_ACQUIRE))
        mlprof_waits_resolve();
    if (real_poll && real_ppoll && real_select && real_pselect && real_epoll_wait && real_epoll_pwait &&
        real_nanosleep && real_clock_nanosleep)
        return 1;
    errno = ENOSYS;
    return 0;
}

/* CLOCK_MONOTONIC in ns. */
static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t mlprof_deadline_ms(int ms, uint64_t now);
int mlprof_timespec_valid(const struct timespec *ts);
uint64_t mlprof_deadline_ts(const struct timespec *ts, uint64_t now);
int mlprof_remaining_ms(uint64_t deadline, uint64_t now);
const struct timespec *mlprof_remaining_ts(uint64_t deadline, uint64_t now, struct timespec *out);

/* Did our sampling signal, and nothing else we can tell apart, interrupt the call? (A foreign
 * signal arriving in the same call is indistinguishable; the window is the syscall's entry, so
 * the coincidence is rare, and Python itself retries EINTR anyway.) */
#define OURS(r, before) ((r) == -1 && errno == EINTR && mlprof_signals_taken() != (before))

/* Whether a timeout may block: none (forever), or one that is not zero. */
static int blocks_ts(const struct timespec *ts) { return !ts || ts->tv_sec != 0 || ts->tv_nsec != 0; }
static int blocks_tv(const struct timeval *tv) { return !tv || tv->tv_sec != 0 || tv->tv_usec != 0; }

HIDDEN int mlprof_poll(struct pollfd *fds, nfds_t n, int timeout) {
    uint64_t deadline, before, since;
    int r;
    if (!ready())
        return -1;
    since = timeout != 0 ? mlprof_wait_begin() : 0;
    deadline = mlprof_deadline_ms(timeout, timeout > 0 ? now_ns() : 0);
    do {
        before = mlprof_signals_taken();
        r = real_poll(fds, n, timeout > 0 ? mlprof_remaining_ms(deadline, now_ns()) : timeout);
    } while (OURS(r, before));
    mlprof_wait_end(since);
    return r;
}

HIDDEN int mlprof_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask) {
    uint64_t deadline, before, since;
    struct timespec left;
    int r;
    if (!ready())
        return -1;
    if (!mlprof_timespec_valid(timeout)) /* the kernel's EINVAL, at once, as without us */
        return real_ppoll(fds, n, timeout, mask);
    since = blocks_ts(timeout) ? mlprof_wait_begin() : 0;
    deadline = mlprof_deadline_ts(timeout, now_ns());
    do {
        before = mlprof_signals_taken();
        r = real_ppoll(fds, n, timeout ? mlprof_remaining_ts(deadline, now_ns(), &left) : 0, mask);
    } while (OURS(r, before));
    mlprof_wait_end(since);
    return r;
}

/* Linux updates select's timeout with the time left, so a retry passes it on. */
HIDDEN int mlprof_select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout) {
    uint64_t before, since;
    int res;
    if (!ready())
        return -1;
    since = blocks_tv(timeout) ? mlprof_wait_begin() : 0;
    do {
        before = mlprof_signals_taken();
        res = real_select(n, r, w, e, timeout);
    } while (OURS(res, before));
    mlprof_wait_end(since);
    return res;
}

HIDDEN int mlprof_pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout, const sigset_t *mask) {
    uint64_t deadline, before, since;
    struct timespec left;
    int res;
    if (!ready())
        return -1;
    if (!mlprof_timespec_valid(timeout)) /* the kernel's EINVAL, at once, as without us */
        return real_pselect(n, r, w, e, timeout, mask);
    since = blocks_ts(timeout) ? mlprof_wait_begin() : 0;
    deadline = mlprof_deadline_ts(timeout, now_ns());
    do {
        before = mlprof_signals_taken();
        res = real_pselect(n, r, w, e, timeout ? mlprof_remaining_ts(deadline, now_ns(), &left) : 0, mask);
    } while (OURS(res, before));
    mlprof_wait_end(since);
    return res;
}

HIDDEN int mlprof_epoll_wait(int epfd, struct epoll_event *events, int max, int timeout) {
    uint64_t deadline, before, since;
    int r;
    if (!ready())
        return -1;
    since = timeout != 0 ? mlprof_wait_begin() : 0;
    deadline = mlprof_deadline_ms(timeout, timeout > 0 ? now_ns() : 0);
    do {
        before = mlprof_signals_taken();
        r = real_epoll_wait(epfd, events, max, timeout > 0 ? mlprof_remaining_ms(deadline, now_ns()) : timeout);
    } while (OURS(r, before));
    mlprof_wait_end(since);
    return r;
}

HIDDEN int mlprof_epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout, const sigset_t *mask) {
    uint64_t deadline, before, since;
    int r;
    if (!ready())
        return -1;
    since = timeout != 0 ? mlprof_wait_begin() : 0;
    deadline = mlprof_deadline_ms(timeout, timeout > 0 ? now_ns() : 0);
    do {
        before = mlprof_signals_taken();
        r = real_epoll_pwait(epfd, events, max, timeout > 0 ? mlprof_remaining_ms(deadline, now_ns()) : timeout, mask);
    } while (OURS(r, before));
    mlprof_wait_end(since);
    return r;
}

HIDDEN int mlprof_epoll_pwait2(int epfd, struct epoll_event *events, int max, const struct timespec *timeout,
                               const sigset_t *mask) {
    uint64_t deadline, before, since;
    struct timespec left;
    int r;
    if (!ready())
        return -1;
    if (!real_epoll_pwait2) {
        errno = ENOSYS;
        return -1;
    }
    if (!mlprof_timespec_valid(timeout)) /* the kernel's EINVAL, at once, as without us */
        return real_epoll_pwait2(epfd, events, max, timeout, mask);
    since = blocks_ts(timeout) ? mlprof_wait_begin() : 0;
    deadline = mlprof_deadline_ts(timeout, now_ns());
    do {
        before = mlprof_signals_taken();
        r = real_epoll_pwait2(epfd, events, max, timeout ? mlprof_remaining_ts(deadline, now_ns(), &left) : 0, mask);
    } while (OURS(r, before));
    mlprof_wait_end(since);
    return r;
}

/* Sleeps, always timed (their arguments are not read here: a bad pointer gets the kernel's
 * EFAULT, as without us). A relative sleep interrupted by our signal is made again for the time
 * the kernel wrote back as left (into the caller's `rem`, or our own `left` without one); an
 * absolute one (TIMER_ABSTIME) again as it was. */
HIDDEN int mlprof_nanosleep(const struct timespec *req, struct timespec *rem) {
    uint64_t before, since;
    struct timespec again, left, *out = rem ? rem : &left;
    const struct timespec *ask = req;
    int r;
    if (!ready())
        return -1;
    since = mlprof_wait_begin();
    for (;;) {
        before = mlprof_signals_taken();
        r = real_nanosleep(ask, out);
        if (!OURS(r, before))
            break;
        again = *out; /* written by the kernel, so a valid pointer */
        ask = &again;
    }
    mlprof_wait_end(since);
    return r;
}

/* Returns an error number, not -1 with errno (POSIX). */
HIDDEN int mlprof_clock_nanosleep(clockid_t clock, int flags, const struct timespec *req, struct timespec *rem) {
    uint64_t before, since;
    struct timespec again, left, *out = rem ? rem : &left;
    const struct timespec *ask = req;
    int r, saved = errno;
    if (!ready()) {
        errno = saved;
        return ENOSYS;
    }
    since = mlprof_wait_begin();
    for (;;) {
        before = mlprof_signals_taken();
        r = real_clock_nanosleep(clock, flags, ask, out);
        if (r != EINTR || mlprof_signals_taken() == before)
            break;
        if (!(flags & TIMER_ABSTIME)) {
            again = *out;
            ask = &again;
        }
    }
    mlprof_wait_end(since);
    return r;
}
