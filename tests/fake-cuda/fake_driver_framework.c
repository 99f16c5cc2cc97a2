/* A stand-in for a library linked against the CUDA driver (`-lcuda`: CuPy's, Triton's
 * launchers): its references to `cuMemAlloc_v2` are bound by the dynamic loader. */
#include <stddef.h>
#include <stdint.h>

int cuMemAlloc_v2(uint64_t *, size_t);

uint64_t fwd_alloc(size_t n) { uint64_t p = 0; return cuMemAlloc_v2(&p, n) == 0 ? p : 0; }
