/* A tiny shared library with its own thread-local variable. Loading many copies of it with
 * dlopen makes the dynamic loader grow every thread's TLS vector (DTV) lazily: the next
 * general-dynamic TLS access on a thread calls malloc. tests/scripts/tls_dlopen.py uses it to
 * check that mlprof's signal handler never makes such an access (it would deadlock on the
 * malloc lock, or corrupt the heap, when the signal interrupts malloc). */
static __thread int counter;

int tls_module_bump(void) { return ++counter; }
