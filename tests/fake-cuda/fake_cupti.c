/* A stand-in for NVIDIA's CUPTI (libcupti.so.13) for tests on machines without a GPU: the
 * activity API as its headers define it (cupti_activity.h, CUPTI 12.x/13.x), fed by the fake
 * runtime (fake_cudart.c), which tells it of every kernel it "runs" (`fake_cupti_kernel`). For
 * each one it writes, into the client's buffers, what real CUPTI writes for a traced launch:
 * for the runtime's call and the driver's call inside it, an external correlation record per
 * kind with an id pushed on the thread and the API record; and the kernel record
 * (CUpti_ActivityKernel9's 208 bytes) carrying the runtime call's id, with timestamps in
 * CLOCK_REALTIME nanoseconds as CUPTI's default clock. API records and kernels go to separate
 * buffers, the kernels' handed back first (so a kernel arrives before its call's correlation);
 * a buffer goes back when the next record does not fit, and on `cuptiActivityFlushAll`. Everything is known
 * by construction: a kernel's device time is the duration the runtime was told. Not
 * thread-safe: the tests launch from one thread. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int CUptiResult;
typedef void (*request_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*complete_fn)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size,
                            size_t valid);

enum {
    SUCCESS = 0, INVALID_PARAMETER = 1, MAX_LIMIT_REACHED = 12, QUEUE_EMPTY = 18,
    INVALID_KIND = 21,
};
enum { KIND_KERNEL = 3, KIND_DRIVER = 4, KIND_RUNTIME = 5, KIND_CONCURRENT_KERNEL = 10,
       KIND_EXTERNAL_CORRELATION = 39, KINDS = 64 };
enum { EXTERNAL_KINDS = 6, STACK = 16 };
#define KERNEL_BYTES 208
#define API_BYTES 40
#define CORRELATION_BYTES 24

static request_fn requested;
static complete_fn completed;
static int enabled[KINDS];
static uint64_t pushed[EXTERNAL_KINDS][STACK];
static int depth[EXTERNAL_KINDS];
static uint32_t next_correlation = 1;
/* Two buffers at a time, as CUPTI 13's per-thread buffers make it: the API records (and the
 * external correlations before them) in one, the kernels in the other; the kernels' buffer is
 * handed back first, so a kernel reaches the client before its call's correlation. */
struct buf { uint8_t *data; size_t size, used; };
static struct buf api_buf, kernel_buf;
static uint64_t clock_base;

static uint64_t realtime_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

CUptiResult cuptiGetVersion(uint32_t *version) {
    if (!version) return INVALID_PARAMETER;
    *version = 130202;
    return SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t *ns) {
    if (!ns) return INVALID_PARAMETER;
    *ns = realtime_ns();
    return SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(request_fn request, complete_fn complete) {
    if (!request || !complete) return INVALID_PARAMETER;
    requested = request;
    completed = complete;
    return SUCCESS;
}

CUptiResult cuptiActivityEnable(int kind) {
    if (kind <= 0 || kind >= KINDS) return INVALID_KIND;
    enabled[kind] = 1;
    return SUCCESS;
}

CUptiResult cuptiActivityDisable(int kind) {
    if (kind <= 0 || kind >= KINDS) return INVALID_KIND;
    enabled[kind] = 0;
    return SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(int kind, uint64_t id) {
    if (kind <= 0 || kind >= EXTERNAL_KINDS || depth[kind] >= STACK) return INVALID_PARAMETER;
    pushed[kind][depth[kind]++] = id;
    return SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(int kind, uint64_t *last) {
    if (kind <= 0 || kind >= EXTERNAL_KINDS) return INVALID_PARAMETER;
    if (depth[kind] == 0) return QUEUE_EMPTY;
    uint64_t id = pushed[kind][--depth[kind]];
    if (last) *last = id;
    return SUCCESS;
}

static size_t record_bytes(uint32_t kind) {
    switch (kind) {
    case KIND_KERNEL: case KIND_CONCURRENT_KERNEL: return KERNEL_BYTES;
    case KIND_RUNTIME: case KIND_DRIVER: return API_BYTES;
    case KIND_EXTERNAL_CORRELATION: return CORRELATION_BYTES;
    default: return 0;
    }
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **record) {
    if (!buf || !record) return INVALID_PARAMETER;
    size_t at = 0;
    if (*record) {
        uint8_t *r = *record;
        uint32_t kind;
        memcpy(&kind, r, 4);
        at = (size_t)(r - buf) + record_bytes(kind);
    }
    if (at + 4 > valid) return MAX_LIMIT_REACHED;
    uint32_t kind;
    memcpy(&kind, buf + at, 4);
    if (!record_bytes(kind) || at + record_bytes(kind) > valid) return INVALID_KIND;
    *record = buf + at;
    return SUCCESS;
}

static void hand_back(struct buf *b) {
    if (b->data && completed) completed(NULL, 0, b->data, b->size, b->used);
    b->data = NULL;
    b->size = b->used = 0;
}

/* Room for `bytes` more in `b`: the full buffer goes back, a new one is asked for. */
static uint8_t *room(struct buf *b, size_t bytes) {
    if (b->data && b->used + bytes > b->size) hand_back(b);
    if (!b->data) {
        size_t max_records = 0;
        if (!requested) return NULL;
        requested(&b->data, &b->size, &max_records);
        b->used = 0;
        if (!b->data || b->size < bytes) {
            b->data = NULL;
            return NULL;
        }
    }
    uint8_t *at = b->data + b->used;
    memset(at, 0, bytes);
    b->used += bytes;
    return at;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    hand_back(&kernel_buf);
    hand_back(&api_buf);
    return SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
    (void)ctx; (void)stream;
    if (!dropped) return INVALID_PARAMETER;
    *dropped = 0;
    return SUCCESS;
}

static void put32(uint8_t *r, size_t at, uint32_t v) { memcpy(r + at, &v, 4); }
static void put64(uint8_t *r, size_t at, uint64_t v) { memcpy(r + at, &v, 8); }

void fake_cupti_kernel(const char *name, uint64_t ns, uint32_t device, uint32_t stream);

/* Loaded: tell the fake runtime, if the process has it, where to tell its kernels. */
__attribute__((constructor)) static void tell_runtime(void) {
    void *rt = dlopen("libcudart.so.13", RTLD_NOLOAD | RTLD_LAZY);
    if (!rt) return;
    void (*set)(void *) = (void (*)(void *))dlsym(rt, "fake_cuda_set_cupti");
    if (set) set((void *)fake_cupti_kernel);
    dlclose(rt);
}

/* The fake runtime launched kernel `name` of `ns` of device time on `device`'s `stream`: its
 * records, as real CUPTI writes them for the enabled kinds. Kernels run one after another
 * from the first launch on (a device clock of our own, never behind the host's). */
void fake_cupti_kernel(const char *name, uint64_t ns, uint32_t device, uint32_t stream) {
    /* The runtime's launch calls the driver's inside it: two API calls, two correlation ids,
     * each with its external correlations; the kernel carries the runtime call's. */
    uint32_t correlation = next_correlation++, driver = next_correlation++;
    uint32_t calls[2] = {driver, correlation};
    int kinds[2] = {KIND_DRIVER, KIND_RUNTIME};
    for (int c = 0; c < 2; c++) {
        if (!enabled[kinds[c]]) continue;
        if (enabled[KIND_EXTERNAL_CORRELATION]) {
            for (int kind = 1; kind < EXTERNAL_KINDS; kind++) {
                if (!depth[kind]) continue;
                uint8_t *r = room(&api_buf, CORRELATION_BYTES);
                if (!r) return;
                put32(r, 0, KIND_EXTERNAL_CORRELATION);
                put32(r, 4, (uint32_t)kind);
                put64(r, 8, pushed[kind][depth[kind] - 1]);
                put32(r, 16, calls[c]);
            }
        }
        uint8_t *r = room(&api_buf, API_BYTES);
        if (!r) return;
        uint64_t now = realtime_ns();
        put32(r, 0, (uint32_t)kinds[c]);
        put32(r, 4, c ? 211 : 307); /* cbid: cudaLaunchKernel, cuLaunchKernel */
        put64(r, 8, now);
        put64(r, 16, now + 1000);
        put32(r, 32, calls[c]);
    }
    if (!enabled[KIND_CONCURRENT_KERNEL] && !enabled[KIND_KERNEL]) return;
    uint8_t *r = room(&kernel_buf, KERNEL_BYTES);
    if (!r) return;
    uint64_t now = realtime_ns();
    if (clock_base < now) clock_base = now;
    put32(r, 0, enabled[KIND_CONCURRENT_KERNEL] ? KIND_CONCURRENT_KERNEL : KIND_KERNEL);
    put64(r, 16, clock_base);          /* start */
    put64(r, 24, clock_base + ns);     /* end */
    put64(r, 32, clock_base + ns);     /* completed */
    put32(r, 40, device);
    put32(r, 44, 1);                   /* context */
    put32(r, 48, stream);
    put32(r, 92, correlation);
    put64(r, 104, (uint64_t)(uintptr_t)name);
    clock_base += ns;
}
