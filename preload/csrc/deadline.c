/* Deadline arithmetic of the wait hooks (wait.c), apart so that unit tests can link it
 * without the hooks themselves. Deadlines are CLOCK_MONOTONIC nanoseconds. */
#include <limits.h>
#include <stdint.h>
#include <time.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* A deadline: UINT64_MAX is "forever" (or too far away to matter: about 584 years). Sums
 * saturate, so a timeout of LONG_MAX seconds is forever, not a date in the past. */
#define FOREVER UINT64_MAX

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > FOREVER - b ? FOREVER : a + b; }

HIDDEN uint64_t mlprof_deadline_ms(int ms, uint64_t now) {
    return ms < 0 ? FOREVER : sat_add(now, (uint64_t)ms * 1000000u);
}

/* Whether the kernel takes this timespec as a timeout: none (NULL, forever), or tv_sec not
 * negative and tv_nsec in [0, 1e9) (the kernel's timespec64_valid). Any other it refuses with
 * EINVAL at once, so the hooks pass such a call on unchanged for the kernel to refuse, rather
 * than make a deadline of it (which turned {-1,0} into 0, {0,2e9} into a wait of 2 s). */
HIDDEN int mlprof_timespec_valid(const struct timespec *ts) {
    return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000L);
}

/* The deadline of a valid timeout (mlprof_timespec_valid); negative parts, which a valid one
 * has not, count as zero. */
HIDDEN uint64_t mlprof_deadline_ts(const struct timespec *ts, uint64_t now) {
    uint64_t sec, nsec;
    if (!ts)
        return FOREVER;
    sec = ts->tv_sec > 0 ? (uint64_t)ts->tv_sec : 0;
    nsec = ts->tv_nsec > 0 ? (uint64_t)ts->tv_nsec : 0;
    if (sec > FOREVER / 1000000000u)
        return FOREVER;
    return sat_add(sat_add(now, sec * 1000000000u), nsec);
}

/* Milliseconds left (rounded up), -1 for forever, capped at INT_MAX. */
HIDDEN int mlprof_remaining_ms(uint64_t deadline, uint64_t now) {
    uint64_t left;
    if (deadline == FOREVER)
        return -1;
    left = deadline > now ? deadline - now : 0;
    left = (left + 999999u) / 1000000u;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/* The timespec left; NULL (forever) when the deadline is forever. */
HIDDEN const struct timespec *mlprof_remaining_ts(uint64_t deadline, uint64_t now, struct timespec *out) {
    uint64_t left;
    if (deadline == FOREVER)
        return 0;
    left = deadline > now ? deadline - now : 0;
    out->tv_sec = (time_t)(left / 1000000000u);
    out->tv_nsec = (long)(left % 1000000000u);
    return out;
}

