/* A stand-in for the CUDA runtime (libcudart.so.13) for tests on machines without a GPU. It
 * exports the runtime functions mlprof interposes under the version `libcudart.so.13`, as the
 * real one does, so that a library linked against it refers to `cudaMalloc@libcudart.so.13`.
 * Device memory is a range of addresses never touched; kernels are work items of a set
 * duration queued on one stream; a synchronisation waits for the queued work, by sleeping or,
 * when asked, by spinning on the CPU as the real runtime does by default. Everything is known
 * by construction to the test that drives it. Not thread-safe: the tests drive it from one
 * thread. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dlfcn.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef struct { unsigned x, y, z; } dim3;

/* Fake device addresses: never dereferenced, only told apart from host ones. */
#define DEVICE_LO 0x600000000000ULL
#define DEVICE_HI 0x610000000000ULL
static uint64_t next_device = DEVICE_LO;
static int current_device;
static uint64_t launch_ns;  /* GPU time of each kernel launched */
static uint64_t launch_cpu_ns; /* CPU time each launch takes (spinning on the thread's clock) */
static uint64_t pending_ns; /* work queued and not yet waited for */
static int spin;            /* synchronisations spin on the CPU instead of sleeping */
static cudaError_t last_error;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static void wait_ns(uint64_t ns) {
    if (spin) {
        uint64_t end = now_ns() + ns;
        while (now_ns() < end) {
        }
    } else {
        struct timespec t = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
        while (nanosleep(&t, &t) != 0) {
        }
    }
}

static cudaError_t wait_pending(void) {
    wait_ns(pending_ns);
    pending_ns = 0;
    return 0;
}

static int on_device(const void *p) {
    return (uint64_t)(uintptr_t)p >= DEVICE_LO && (uint64_t)(uintptr_t)p < DEVICE_HI;
}

/* The driver, as the real runtime reaches it: a handle to `libcuda.so.1` (here only if the
 * program loaded one) and `cuGetProcAddress_v2` looked up through it. */
typedef int (*get_proc_t)(const char *, void **, int, unsigned long long, int *);
static get_proc_t driver_entry(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? (get_proc_t)dlsym(h, "cuGetProcAddress_v2") : 0;
}

static cudaError_t device_alloc(void **p, size_t n) {
    if (!p) return last_error = 1; /* cudaErrorInvalidValue */
    /* With a driver loaded, device memory comes from it, as in the real runtime. */
    static int (*driver_alloc)(uint64_t *, size_t);
    static int asked;
    if (!asked) {
        asked = 1;
        get_proc_t entry = driver_entry();
        if (entry) entry("cuMemAlloc", (void **)&driver_alloc, 13000, 0, 0);
    }
    if (driver_alloc) {
        uint64_t d = 0;
        if (driver_alloc(&d, n) != 0) return last_error = 2;
        *p = (void *)(uintptr_t)d;
        return 0;
    }
    *p = (void *)(uintptr_t)next_device;
    next_device += (n + 511) & ~(uint64_t)511;
    return 0;
}

/* Knobs of the fake (not CUDA). */
void fake_cuda_set_launch_ns(uint64_t ns) { launch_ns = ns; }
void fake_cuda_set_launch_cpu_ns(uint64_t ns) { launch_cpu_ns = ns; }

/* A launch's own CPU cost, as a real runtime's (measured on the thread's CPU clock, so the
 * same on a busy machine). */
static void launch_cost(void) {
    if (!launch_cpu_ns) return;
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    uint64_t end = (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec + launch_cpu_ns;
    for (;;) {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        if ((uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec >= end) break;
    }
}

/* CUPTI, once the process has loaded it (the fake one, `libcupti.so.13`, tells the runtime
 * when it is loaded): every kernel is told to it with its name and device time, as the real
 * driver tells the real CUPTI. Without it a launch costs what it did. */
typedef void (*cupti_kernel_fn)(const char *, uint64_t, uint32_t, uint32_t);
static char kernel_name[512] = "fake_kernel";
static cupti_kernel_fn cupti_kernel;
void fake_cuda_set_cupti(cupti_kernel_fn f) { cupti_kernel = f; }
void fake_cuda_set_kernel_name(const char *name) {
    strncpy(kernel_name, name, sizeof kernel_name - 1);
}
static void ran(void) {
    if (!cupti_kernel) return;
    /* The name is CUPTI's to keep: one copy per distinct name, as the real one interns it. */
    static char names[16][512];
    static int count;
    const char *name = NULL;
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], kernel_name) == 0) name = names[i];
    if (!name && count < 16) {
        strcpy(names[count], kernel_name);
        name = names[count++];
    }
    if (name) cupti_kernel(name, launch_ns, (uint32_t)current_device, 0);
}
void fake_cuda_set_spin(int on) { spin = on; }
void fake_cuda_fail_next(cudaError_t e) { last_error = e; }

cudaError_t cudaGetDevice(int *d) { if (d) *d = current_device; return 0; }
cudaError_t cudaSetDevice(int d) { current_device = d; return 0; }
cudaError_t cudaPeekAtLastError(void) { return last_error; }
cudaError_t cudaGetLastError(void) { cudaError_t e = last_error; last_error = 0; return e; }

cudaError_t cudaMalloc(void **p, size_t n) { return device_alloc(p, n); }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) { (void)s; return device_alloc(p, n); }
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned flags) { (void)flags; return device_alloc(p, n); }
cudaError_t cudaFree(void *p) { (void)p; return 0; }
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { (void)p; (void)s; return 0; }

cudaError_t cudaMallocHost(void **p, size_t n) {
    if (!p) return last_error = 1;
    *p = malloc(n ? n : 1);
    return *p ? 0 : (last_error = 2); /* cudaErrorMemoryAllocation */
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; return cudaMallocHost(p, n); }
cudaError_t cudaFreeHost(void *p) { free(p); return 0; }

struct attributes { int type; int device; void *device_pointer; void *host_pointer; };
cudaError_t cudaPointerGetAttributes(struct attributes *a, const void *p) {
    if (!a) return last_error = 1;
    memset(a, 0, sizeof *a);
    a->type = on_device(p) ? 2 : 0;
    a->device = current_device;
    return 0;
}

static cudaError_t copy(void *dst, const void *src, size_t n) {
    if (!on_device(dst) && !on_device(src)) memmove(dst, src, n);
    return 0;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    (void)kind;
    wait_pending(); /* a synchronous copy waits for the work queued before it */
    return copy(dst, src, n);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s) {
    (void)kind; (void)s;
    return copy(dst, src, n);
}
cudaError_t cudaMemcpy2D(void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, int kind) {
    (void)dst; (void)dp; (void)src; (void)sp; (void)w; (void)h; (void)kind;
    return wait_pending();
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, int kind, cudaStream_t s) {
    (void)dst; (void)dp; (void)src; (void)sp; (void)w; (void)h; (void)kind; (void)s;
    return 0;
}
cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) {
    (void)dst; (void)dd; (void)src; (void)sd; (void)n;
    return wait_pending();
}
cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, cudaStream_t s) {
    (void)dst; (void)dd; (void)src; (void)sd; (void)n; (void)s;
    return 0;
}

cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s) {
    (void)f; (void)g; (void)b; (void)args; (void)shared; (void)s;
    pending_ns += launch_ns;
    launch_cost();
    ran();
    return 0;
}
cudaError_t cudaLaunchKernelExC(const void *config, const void *f, void **args) {
    (void)config; (void)f; (void)args;
    pending_ns += launch_ns;
    return 0;
}
cudaError_t cudaGraphLaunch(void *graph, cudaStream_t s) { (void)graph; (void)s; pending_ns += launch_ns; return 0; }

cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return wait_pending(); }
cudaError_t cudaDeviceSynchronize(void) { return wait_pending(); }
cudaError_t cudaEventSynchronize(void *e) { (void)e; return wait_pending(); }

cudaError_t cudaRuntimeGetVersion(int *v) { if (!v) return 1; *v = 13000; return 0; }
/* A driver function for the runtime's version or a given one, from the driver. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *name, void **pfn, unsigned version,
                                             unsigned long long flags, int *status) {
    get_proc_t entry = driver_entry();
    if (!entry) return last_error = 3; /* cudaErrorInitializationError */
    return entry(name, pfn, (int)version, flags, status) == 0 ? 0 : (last_error = 500);
}
cudaError_t cudaGetDriverEntryPoint(const char *name, void **pfn, unsigned long long flags, int *status) {
    return cudaGetDriverEntryPointByVersion(name, pfn, 13000, flags, status);
}
