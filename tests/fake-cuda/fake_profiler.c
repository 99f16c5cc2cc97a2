/* A profiler of the program's own, as PyTorch's Kineto is: linked against CUPTI
 * (libcupti.so.13), it registers its own activity buffers and counts the kernel records CUPTI
 * hands it. `prof_start` takes CUPTI (callbacks, then the kernel kind), `prof_stop` flushes and
 * says how many kernels it saw. `prof_start_looked_up` registers through the function looked
 * up with `dlsym` on a handle of CUPTI, as XLA's profiler does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUptiResult;
typedef void (*request_fn)(uint8_t **, size_t *, size_t *);
typedef void (*complete_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
CUptiResult cuptiActivityRegisterCallbacks(request_fn, complete_fn);
CUptiResult cuptiActivityEnable(int kind);
CUptiResult cuptiActivityFlushAll(uint32_t flag);
CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record);

static long kernels;

static void requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, 1 << 16);
    *size = *buffer ? 1 << 16 : 0;
    *max_records = 0;
}

static void completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    void *record = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == 0) {
        uint32_t kind;
        memcpy(&kind, record, 4);
        if (kind == 10) kernels++; /* CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL */
    }
    free(buffer);
}

int prof_start(void) {
    int r = cuptiActivityRegisterCallbacks(requested, completed);
    return r ? r : cuptiActivityEnable(10);
}

int prof_start_looked_up(void) {
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return -1;
    CUptiResult (*reg)(request_fn, complete_fn) =
        (CUptiResult(*)(request_fn, complete_fn))dlsym(h, "cuptiActivityRegisterCallbacks");
    if (!reg) return -2;
    int r = reg(requested, completed);
    return r ? r : cuptiActivityEnable(10);
}

long prof_stop(void) {
    cuptiActivityFlushAll(0);
    return kernels;
}
