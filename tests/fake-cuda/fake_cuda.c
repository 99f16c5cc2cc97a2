/* A stand-in for the CUDA driver (libcuda.so.1) for tests on machines without a GPU: the
 * allocation, copy, synchronisation and launch functions mlprof interposes, the queries it
 * asks (`cuCtxGetDevice`, `cuPointerGetAttribute`) and `cuGetProcAddress`. Like the real
 * driver, `cuGetProcAddress` hands out for some names an internal entry rather than the
 * exported function (here `cuMemAlloc`), a per-thread-default-stream variant when asked
 * (`cuMemcpyHtoDAsync`), and an older signature for an older version (`cuMemAlloc` before
 * CUDA 3.2 took 32-bit sizes). Device memory is a range of addresses never touched; kernels
 * are work items of a set duration; a synchronisation waits for them. Not thread-safe. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;

#define DEVICE_LO 0x620000000000ULL
#define DEVICE_HI 0x630000000000ULL
/* Device memory of the fake runtime (fake_cudart.c) is device memory here too. */
#define RUNTIME_LO 0x600000000000ULL
static uint64_t next_device = DEVICE_LO;
static uint64_t next_handle = 0x1000;
static int current_device;
static uint64_t launch_ns, pending_ns;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static CUresult wait_pending(void) {
    struct timespec t = {(time_t)(pending_ns / 1000000000ULL), (long)(pending_ns % 1000000000ULL)};
    while (nanosleep(&t, &t) != 0) {
    }
    pending_ns = 0;
    (void)now_ns;
    return 0;
}

static CUresult alloc(CUdeviceptr *p, size_t n) {
    if (!p) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *p = next_device;
    next_device += (n + 511) & ~(uint64_t)511;
    return 0;
}

/* Knobs of the fake (not CUDA). */
void fake_cu_set_launch_ns(uint64_t ns) { launch_ns = ns; }
void fake_cu_set_device(int d) { current_device = d; }

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuCtxGetDevice(int *d) { if (!d) return 1; *d = current_device; return 0; }
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p) {
    if (!data || attribute != 2) return 1;
    if (p >= RUNTIME_LO && p < DEVICE_HI) { *(unsigned *)data = 2; return 0; } /* DEVICE */
    return 1; /* plain host memory: not known to CUDA */
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return alloc(p, n); }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return alloc(p, n); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, CUstream s) { (void)pool; (void)s; return alloc(p, n); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) { (void)flags; return alloc(p, n); }
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e) {
    (void)e;
    if (!pitch) return 1;
    *pitch = (w + 511) & ~(size_t)511;
    return alloc(p, *pitch * h);
}
CUresult cuMemAllocHost_v2(void **p, size_t n) { static char pinned[1 << 16]; if (!p) return 1; *p = pinned; (void)n; return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; return cuMemAllocHost_v2(p, n); }
CUresult cuMemFreeHost(void *p) { (void)p; return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { (void)p; return 0; }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)p; (void)s; return 0; }
CUresult cuMemCreate(uint64_t *handle, size_t n, const void *prop, unsigned long long flags) {
    (void)n; (void)flags;
    if (!handle || !prop) return 1;
    *handle = next_handle++;
    return 0;
}
CUresult cuMemRelease(uint64_t handle) { (void)handle; return 0; }

static CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    if (dst < RUNTIME_LO && src < RUNTIME_LO) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { wait_pending(); return copy(d, (uintptr_t)s, n); }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { wait_pending(); return copy((uintptr_t)d, s, n); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy(d, s, n); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; return copy(d, (uintptr_t)s, n); }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return copy((uintptr_t)d, s, n); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return copy(d, s, n); }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { wait_pending(); return copy(d, s, n); }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return copy(d, s, n); }
CUresult cuMemcpyPeer(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n) { (void)dc; (void)sc; wait_pending(); return copy(d, s, n); }
CUresult cuMemcpyPeerAsync(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n, CUstream st) { (void)dc; (void)sc; (void)st; return copy(d, s, n); }

CUresult cuStreamSynchronize(CUstream s) { (void)s; return wait_pending(); }
CUresult cuCtxSynchronize(void) { return wait_pending(); }
CUresult cuEventSynchronize(void *e) { (void)e; return wait_pending(); }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)s; (void)params; (void)extra;
    pending_ns += launch_ns;
    return 0;
}
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
    (void)config; (void)f; (void)params; (void)extra;
    pending_ns += launch_ns;
    return 0;
}
CUresult cuGraphLaunch(void *exec, CUstream s) { (void)exec; (void)s; pending_ns += launch_ns; return 0; }

/* What `cuGetProcAddress` hands out instead of an exported function. */
static CUresult internal_mem_alloc(CUdeviceptr *p, size_t n) { return alloc(p, n); }
static CUresult mem_alloc_v1(unsigned *p, unsigned n) {
    CUdeviceptr d;
    CUresult r = alloc(&d, n);
    if (r == 0) *p = (unsigned)(d & 0xffffffffu);
    return r;
}
static CUresult htod_async_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) { return cuMemcpyHtoDAsync_v2(d, s, n, st); }

#define PER_THREAD_DEFAULT_STREAM 2
struct entry { const char *name; void *fn; };
static const struct entry entries[] = {
    {"cuMemAllocAsync", (void *)cuMemAllocAsync}, {"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync},
    {"cuMemAllocManaged", (void *)cuMemAllocManaged}, {"cuMemAllocPitch", (void *)cuMemAllocPitch_v2},
    {"cuMemAllocHost", (void *)cuMemAllocHost_v2}, {"cuMemHostAlloc", (void *)cuMemHostAlloc},
    {"cuMemFreeHost", (void *)cuMemFreeHost}, {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync}, {"cuMemCreate", (void *)cuMemCreate},
    {"cuMemRelease", (void *)cuMemRelease}, {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2}, {"cuMemcpyDtoD", (void *)cuMemcpyDtoD_v2},
    {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2}, {"cuMemcpyDtoDAsync", (void *)cuMemcpyDtoDAsync_v2},
    {"cuMemcpy", (void *)cuMemcpy}, {"cuMemcpyAsync", (void *)cuMemcpyAsync},
    {"cuMemcpyPeer", (void *)cuMemcpyPeer}, {"cuMemcpyPeerAsync", (void *)cuMemcpyPeerAsync},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize}, {"cuCtxSynchronize", (void *)cuCtxSynchronize},
    {"cuEventSynchronize", (void *)cuEventSynchronize}, {"cuLaunchKernel", (void *)cuLaunchKernel},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx}, {"cuGraphLaunch", (void *)cuGraphLaunch},
    {"cuCtxGetDevice", (void *)cuCtxGetDevice}, {"cuPointerGetAttribute", (void *)cuPointerGetAttribute},
};

CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version, unsigned long long flags, int *status) {
    if (!name || !pfn) return 1;
    void *fn = 0;
    if (strcmp(name, "cuMemAlloc") == 0) {
        fn = version >= 3020 ? (void *)internal_mem_alloc : (void *)mem_alloc_v1;
    } else if (strcmp(name, "cuMemcpyHtoDAsync") == 0) {
        fn = (flags & PER_THREAD_DEFAULT_STREAM) ? (void *)htod_async_ptsz : (void *)cuMemcpyHtoDAsync_v2;
    } else {
        for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
            if (strcmp(name, entries[i].name) == 0) fn = entries[i].fn;
    }
    *pfn = fn;
    if (status) *status = fn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / SYMBOL_NOT_FOUND */
    return fn ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}
CUresult cuGetProcAddress(const char *name, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(name, pfn, version, flags, 0);
}
