"""The CUDA hooks' own cost per call, against the fake CUDA runtime of tests/fake-cuda (no GPU
needed): a framework library linked against it makes N calls of each kind in a C loop, timed
inside the process, plain and under `mlprof run`; the difference per call is the hooks' cost
(forwarding, the nested-call guard, and for allocations and copies the stack walk and record;
launches are sampled 1 in 64; the driver's cuLaunchKernel, linked, likewise). Real CUDA calls cost microseconds (a launch 2-5 us, a
cudaMalloc far more), so this says what share of that mlprof adds.

usage: python bench/gpu_hooks.py --mlprof target/release/mlprof [--calls N] [--runs R]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE = os.path.join(ROOT, "tests", "fake-cuda")

PROGRAM = r"""
import ctypes, sys, time
fw = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2])
for name in ["fw_bench_launch", "fw_bench_alloc", "fw_bench_copy", "fw_bench_cu_launch"]:
    getattr(fw, name).argtypes = [ctypes.c_long]
for name in ["fw_bench_launch", "fw_bench_alloc", "fw_bench_copy", "fw_bench_cu_launch"]:
    f = getattr(fw, name)
    f(1000)  # warm: the hooks find the runtime on first use
    t = time.perf_counter()
    f(n)
    print(name[9:], (time.perf_counter() - t) / n * 1e9)
"""

LOOPS = r"""
#include <stddef.h>
typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpyAsync(void *, const void *, size_t, int, void *);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **);
static void kernel(void) {}
void fw_bench_launch(long n) { dim3 g = {1, 1, 1}; for (long i = 0; i < n; i++) cudaLaunchKernel((const void *)kernel, g, g, 0, 0, 0); }
void fw_bench_alloc(long n) { for (long i = 0; i < n; i++) { void *p; cudaMalloc(&p, 1 << 20); cudaFree(p); } }
void fw_bench_cu_launch(long n) { for (long i = 0; i < n; i++) cuLaunchKernel((void *)kernel, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0); }
void fw_bench_copy(long n) { static char a[64], b[64]; for (long i = 0; i < n; i++) cudaMemcpyAsync(a, b, 64, 0, 0); }
"""


def build(dir):
    cc = os.environ.get("CC", "cc")
    rt = os.path.join(dir, "libcudart.so.13")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wl,-soname,libcudart.so.13",
                    "-Wl,--version-script=" + os.path.join(FAKE, "fake_cudart.map"),
                    "-o", rt, os.path.join(FAKE, "fake_cudart.c")], check=True)
    driver = os.path.join(dir, "libcuda.so.1")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o", driver,
                    os.path.join(FAKE, "fake_cuda.c")], check=True)
    src = os.path.join(dir, "loops.c")
    with open(src, "w") as f:
        f.write(LOOPS)
    lib = os.path.join(dir, "libbench.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", lib, src, rt, driver,
                    "-Wl,-rpath,$ORIGIN"],
                   check=True)
    return lib


def measure(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlprof", required=True)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as dir:
        lib = build(dir)
        prog = os.path.join(dir, "prog.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        plain, profiled = [], []
        for _ in range(args.runs):
            plain.append(measure([sys.executable, prog, lib, str(args.calls)]))
            profiled.append(measure([args.mlprof, "run", "-q", "-o", os.path.join(dir, "p.json"),
                                     "--", sys.executable, prog, lib, str(args.calls)]))
    print("| call | plain ns/call | under mlprof ns/call | added ns/call |")
    print("|---|--:|--:|--:|")
    for kind in ["launch", "alloc", "copy", "cu_launch"]:
        a = statistics.median(r[kind] for r in plain)
        b = statistics.median(r[kind] for r in profiled)
        what = {"launch": "cudaLaunchKernel", "alloc": "cudaMalloc + cudaFree",
                "copy": "cudaMemcpyAsync", "cu_launch": "cuLaunchKernel (driver)"}[kind]
        print(f"| {what} | {a:.0f} | {b:.0f} | {b - a:.0f} |")


if __name__ == "__main__":
    main()
