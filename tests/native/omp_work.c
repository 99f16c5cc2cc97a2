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
