/* The _FORTIFY_SOURCE entry points of the calls hooked in wait.c and sigwait.c. A program built
 * with -D_FORTIFY_SOURCE (most distributions' packages) calls __read_chk, __poll_chk and
 * __ppoll_chk where the compiler knows the buffer's size but not that it is large enough:
 * glibc's own versions check the size and then make the system call, past our hooks, so a
 * signalfd read there went unnoticed (a group SIGTERM reached the program twice) and our
 * sampling signal's EINTR reached poll's caller. Each checks as glibc does (its failure is
 * glibc's own __chk_fail, which ends the program as without us) and then goes through the hook.
 *
 * C, not Rust, for the same reason as the hooks they forward to: cancellation points. */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#define HIDDEN __attribute__((visibility("hidden")))

extern void __chk_fail(void) __attribute__((noreturn));

ssize_t mlprof_read(int fd, void *buf, size_t count);
int mlprof_poll(struct pollfd *fds, nfds_t n, int timeout);
int mlprof_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask);

HIDDEN ssize_t mlprof_read_chk(int fd, void *buf, size_t nbytes, size_t buflen) {
    if (nbytes > buflen)
        __chk_fail();
    return mlprof_read(fd, buf, nbytes);
}

HIDDEN int mlprof_poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen) {
    if (fdslen / sizeof(*fds) < nfds)
        __chk_fail();
    return mlprof_poll(fds, nfds, timeout);
}

HIDDEN int mlprof_ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
                            const sigset_t *mask, size_t fdslen) {
    if (fdslen / sizeof(*fds) < nfds)
        __chk_fail();
    return mlprof_ppoll(fds, nfds, timeout, mask);
}
