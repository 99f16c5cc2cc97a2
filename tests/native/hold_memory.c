/* A program without Python that holds memory: allocates argv[1] MiB with malloc, touches
 * every page, holds it argv[2] ms, frees it and exits 0. Used as the child a Python line
 * runs (tests/e2e/child_programs.rs), as the compilers torch.compile runs are. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    size_t bytes = (size_t)atol(argv[1]) << 20;
    long ms = atol(argv[2]);
    char *p = malloc(bytes);
    if (!p)
        return 1;
    memset(p, 1, bytes);
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    /* Read every page back, so that the compiler keeps the allocation and its writes. */
    unsigned long sum = 0;
    for (size_t i = 0; i < bytes; i += 4096)
        sum += ((volatile char *)p)[i];
    free(p);
    return sum == bytes / 4096 ? 0 : 3;
}
