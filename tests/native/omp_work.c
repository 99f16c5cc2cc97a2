/* A parallel loop the way BLAS, torch and onnxruntime run one: an OpenMP team of threads
 * that do the work and then wait (spinning, then sleeping) for the next region. Built with
 * `cc -shared -fPIC -fopenmp`; called through ctypes from tests/scripts/omp_lines.py. */
#include <math.h>

/* `rounds` parallel regions, each `n` iterations of floating-point work spread over the
 * team; returns a checksum so the work is not optimised away. */
double omp_work(int rounds, long n) {
    double total = 0.0;
    for (int r = 0; r < rounds; r++) {
#pragma omp parallel for reduction(+ : total) schedule(static)
        for (long i = 0; i < n; i++) {
            total += sqrt((double)(i + r)) * 1e-9;
        }
    }
    return total;
}

/* `rounds` parallel regions in which the first thread does all the work (`n` iterations)
 * while the rest of the team waits for it at a barrier: the spinning and barrier waiting of a
 * pool with more threads than work. Adds to `*worked` the first thread's CPU seconds over its
 * work, and to `*waited` every other CPU second the team used from entering the first region
 * to leaving the last one's barrier: the waiting at the barriers and between the regions
 * (each thread's own CPU clock: the kernel's accounting of what waiting cost). */
#include <omp.h>
#include <time.h>

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int calls;
/* Where this thread left the barrier of the previous region of call `left_call`. */
static __thread double left_at;
static __thread int left_call;

double omp_one_works(int rounds, long n, double *waited, double *worked) {
    double total = 0.0;
    int call = ++calls;
    for (int r = 0; r < rounds; r++) {
#pragma omp parallel reduction(+ : total)
        {
            double from = thread_cpu();
            double work = 0.0;
            if (omp_get_thread_num() == 0) {
                for (long i = 0; i < n; i++) {
                    total += sqrt((double)(i + r)) * 1e-9;
                }
                work = thread_cpu() - from;
            }
#pragma omp barrier
            double to = thread_cpu();
            /* This thread's CPU between the previous region and this one (the pool's dock). */
            double between = left_call == call ? from - left_at : 0.0;
            left_at = to;
            left_call = call;
#pragma omp atomic
            *worked += work;
#pragma omp atomic
            *waited += to - from - work + between;
        }
    }
    return total;
}
