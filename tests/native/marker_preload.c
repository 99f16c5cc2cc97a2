/* A user's own LD_PRELOAD library: its constructor writes a marker file, proving it loaded. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void mark(void) {
    const char *path = getenv("MARKER_FILE");
    if (path) {
        FILE *f = fopen(path, "a");
        if (f) {
            fputs("loaded\n", f);
            fclose(f);
        }
    }
}
