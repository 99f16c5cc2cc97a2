/* Blocks in poll, ppoll and epoll_pwait2 for 300 ms each while a timer delivers a SIGPROF that
 * looks exactly like mlprof's own sampling signal (SI_TIMER with mlprof's sigev_value) after
 * 50 ms. Under mlprof none may fail with EINTR. Built with -D_FORTIFY_SOURCE=3 as well: the
 * descriptor count comes from argc, so the compiler calls __poll_chk and __ppoll_chk (the
 * test checks that it did). Prints one line per call: "poll 0 after >= 290 ms". */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static timer_t timer;

static void arm(void) {
    struct itimerspec its = { .it_value = { .tv_sec = 0, .tv_nsec = 50 * 1000 * 1000 } };
    timer_settime(timer, 0, &its, NULL);
}

static void say(const char *what, int r, int err, double took) {
    if (r < 0) printf("%s -1 errno %s after %.0f ms\n", what, strerror(err), took);
    else printf("%s %d after %s 290 ms\n", what, r, took >= 290 ? ">=" : "<");
}

int main(int argc, char **argv) {
    (void)argv;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev.sigev_value.sival_ptr = (void *)0x6d6c70726f66UL; /* mlprof's marker */
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) { perror("timer_create"); return 2; }
    struct pollfd fds[4] = {{ .fd = -1 }, { .fd = -1 }, { .fd = -1 }, { .fd = -1 }};
    nfds_t n = (nfds_t)argc; /* 1: known to the program, not to the compiler */
    double start;
    int r;

    arm();
    start = now_ms();
    r = poll(fds, n, 300);
    say("poll", r, errno, now_ms() - start);

    struct timespec ts = { .tv_sec = 0, .tv_nsec = 300 * 1000 * 1000 };
    arm();
    start = now_ms();
    r = ppoll(fds, n, &ts, NULL);
    say("ppoll", r, errno, now_ms() - start);

    int ep = epoll_create1(0);
    struct epoll_event ev[4];
    arm();
    start = now_ms();
    r = epoll_pwait2(ep, ev, 4, &ts, NULL);
    say("epoll_pwait2", r, errno, now_ms() - start);
    return 0;
}
