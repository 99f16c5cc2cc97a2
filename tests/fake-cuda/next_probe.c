/* Whether `dlsym(RTLD_NEXT, ...)` still means "after the object that called": this library
 * defines `probe_symbol` and depends on next_probe_dep.c, which defines it too; looked up
 * RTLD_NEXT from here, the dependency's (2) must be found, as without mlprof. */
#define _GNU_SOURCE
#include <dlfcn.h>

int probe_symbol(void) { return 1; }

int next_probe(void) {
    int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, "probe_symbol");
    return f ? f() : 0;
}
