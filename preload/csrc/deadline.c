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

