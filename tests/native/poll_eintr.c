/* Blocks in poll() for 300 ms while a timer delivers a SIGPROF that looks exactly like
 * mlprof's own sampling signal (SI_TIMER with mlprof's sigev_value) after 50 ms. Under mlprof
 * the poll must not fail with EINTR: prints "poll 0 after >= 290 ms". */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void) {
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev.sigev_value.sival_ptr = (void *)0x6d6c70726f66UL; /* mlprof's marker */
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) { perror("timer_create"); return 2; }
    struct itimerspec its = { .it_value = { .tv_sec = 0, .tv_nsec = 50 * 1000 * 1000 } };
    timer_settime(timer, 0, &its, NULL);
    double start = now_ms();
    int r = poll(NULL, 0, 300);
    int err = errno;
    double took = now_ms() - start;
    if (r < 0) printf("poll -1 errno %s after %.0f ms\n", strerror(err), took);
    else printf("poll %d after %s 290 ms\n", r, took >= 290 ? ">=" : "<");
    return 0;
}
