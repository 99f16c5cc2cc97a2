/* mlprof's per-thread state, in initial-exec TLS: one %fs-relative load per lookup instead of
 * a call to __tls_get_addr (the general-dynamic model Rust uses in a shared library). Safe
 * because the library is loaded at process start (LD_PRELOAD), inside the static TLS block.
 * Zero-initialised; the Rust side (src/local.rs) defines the layout. */
#include <stdint.h>

__attribute__((visibility("hidden"))) __thread __attribute__((tls_model("initial-exec"), aligned(16))) uint64_t mlprof_local_state[32];

__attribute__((visibility("hidden"))) void *mlprof_local(void) { return mlprof_local_state; }

/* Our sampling signals handled on this thread: field `taken` of the Rust `Local` (the eighth
 * u64; src/local.rs checks that offset). Read by the wait hooks in wait.c. */
__attribute__((visibility("hidden"))) uint64_t mlprof_signals_taken(void) { return mlprof_local_state[7]; }
