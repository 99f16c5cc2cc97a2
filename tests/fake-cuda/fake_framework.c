/* A stand-in for a framework's CUDA library (libtorch_cuda, libcupy): linked against the
 * runtime (the fake one, `fake_cudart.c`), so that its references are versioned
 * (`cudaMalloc@libcudart.so.13`) and bound by the dynamic loader, not looked up by name.
 * Python drives it through ctypes. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaMallocAsync(void **, size_t, void *);
cudaError_t cudaMallocManaged(void **, size_t, unsigned);
cudaError_t cudaFree(void *);
cudaError_t cudaFreeAsync(void *, void *);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaHostAlloc(void **, size_t, unsigned);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, void *);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
cudaError_t cudaMemcpyPeer(void *, int, const void *, int, size_t);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
cudaError_t cudaGraphLaunch(void *, void *);
cudaError_t cudaStreamSynchronize(void *);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventSynchronize(void *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaPeekAtLastError(void);

static void kernel(void) {}

uintptr_t fw_alloc(size_t n) { void *p = 0; return cudaMalloc(&p, n) == 0 ? (uintptr_t)p : 0; }
uintptr_t fw_alloc_async(size_t n) { void *p = 0; return cudaMallocAsync(&p, n, 0) == 0 ? (uintptr_t)p : 0; }
uintptr_t fw_alloc_managed(size_t n) { void *p = 0; return cudaMallocManaged(&p, n, 1) == 0 ? (uintptr_t)p : 0; }
int fw_free(uintptr_t p) { return cudaFree((void *)p); }
int fw_free_async(uintptr_t p) { return cudaFreeAsync((void *)p, 0); }
uintptr_t fw_host_alloc(size_t n) { void *p = 0; return cudaMallocHost(&p, n) == 0 ? (uintptr_t)p : 0; }
uintptr_t fw_host_alloc_flags(size_t n) { void *p = 0; return cudaHostAlloc(&p, n, 0) == 0 ? (uintptr_t)p : 0; }
int fw_free_host(uintptr_t p) { return cudaFreeHost((void *)p); }
int fw_copy(uintptr_t dst, uintptr_t src, size_t n, int kind) { return cudaMemcpy((void *)dst, (const void *)src, n, kind); }
int fw_copy_async(uintptr_t dst, uintptr_t src, size_t n, int kind) { return cudaMemcpyAsync((void *)dst, (const void *)src, n, kind, 0); }
int fw_copy_2d(uintptr_t dst, uintptr_t src, size_t w, size_t h, int kind) { return cudaMemcpy2D((void *)dst, w, (const void *)src, w, w, h, kind); }
int fw_copy_peer(uintptr_t dst, uintptr_t src, size_t n) { return cudaMemcpyPeer((void *)dst, 1, (const void *)src, 0, n); }
int fw_launch(int n) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    int bad = 0;
    for (int i = 0; i < n; i++) bad |= cudaLaunchKernel((const void *)kernel, g, b, 0, 0, 0);
    return bad;
}
/* `n` launches of the kernel whose handle is `func` (a distinct number per kernel: the fake
 * runtime never calls it). */
int fw_launch_func(uintptr_t func, int n) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    int bad = 0;
    for (int i = 0; i < n; i++) bad |= cudaLaunchKernel((const void *)func, g, b, 0, 0, 0);
    return bad;
}
int fw_graph_launch(void) { return cudaGraphLaunch((void *)1, 0); }
int fw_stream_sync(void) { return cudaStreamSynchronize(0); }
int fw_device_sync(void) { return cudaDeviceSynchronize(); }
int fw_event_sync(void) { return cudaEventSynchronize((void *)1); }
int fw_set_device(int d) { return cudaSetDevice(d); }
int fw_peek_error(void) { return cudaPeekAtLastError(); }

/* As PyTorch's autograd engine runs a CUDA backward: on a thread of its own, without Python,
 * while the calling line waits for it. The thread computes (`seconds` of its CPU, half before
 * its calls, half after), reserves `bytes` of device memory, copies 1 MiB of it to the device
 * and launches `launches` kernels; returns the block (0 on a failure). */
struct engine {
    size_t bytes;
    int launches;
    double seconds;
    uintptr_t block;
    int bad;
};

static void compute(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    double end = ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
    volatile unsigned long x = 0;
    do {
        for (int i = 0; i < 10000; i++) x += i;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    } while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
}

static void *engine_thread(void *arg) {
    struct engine *e = arg;
    static char host[1 << 20];
    void *p = 0;
    compute(e->seconds / 2);
    if (cudaMalloc(&p, e->bytes) == 0) e->block = (uintptr_t)p;
    e->bad |= p == 0 || cudaMemcpy(p, host, sizeof host, 1) != 0;
    e->bad |= fw_launch(e->launches);
    compute(e->seconds / 2);
    return 0;
}

uintptr_t fw_engine(size_t bytes, int launches, double seconds) {
    struct engine e = {bytes, launches, seconds, 0, 0};
    pthread_t t;
    if (pthread_create(&t, 0, engine_thread, &e) != 0) return 0;
    pthread_join(t, 0);
    return e.bad ? 0 : e.block;
}
