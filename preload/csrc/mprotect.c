/* mprotect: memory the interpreter itself makes executable is its JIT's code (CPython 3.13+
 * maps a trace's code writable, then makes it executable with mprotect, from its own text).
 * The caller's return address is what tells the interpreter's JIT from any other (numba's,
 * XLA's): this hook is reached by a jump from the exported name (src/hooks/exports.rs), so
 * __builtin_return_address(0) is the program's call site. The call itself is the system call,
 * its result and errno the kernel's, as glibc's mprotect gives them.
 *
 * Async-signal-safe: no allocation, no locks; the function told (set by the Rust side at load
 * time) is too. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* Told of every successful mprotect that makes memory executable: (start, bytes, caller). */
static void (*made_executable)(uintptr_t, size_t, uintptr_t);

HIDDEN void mlprof_set_made_executable(void (*f)(uintptr_t, size_t, uintptr_t)) {
    __atomic_store_n(&made_executable, f, __ATOMIC_RELEASE);
}

HIDDEN int mlprof_mprotect(void *addr, size_t len, int prot) {
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    long r = syscall(SYS_mprotect, addr, len, prot);
    if (r == 0 && (prot & PROT_EXEC)) {
        void (*f)(uintptr_t, size_t, uintptr_t) = __atomic_load_n(&made_executable, __ATOMIC_ACQUIRE);
        if (f)
            f((uintptr_t)addr, len, caller);
    }
    return (int)r;
}
