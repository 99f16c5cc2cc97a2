/* A statically linked program: the preload library cannot load into it. */
#include <stdio.h>
int main(void) { puts("static hello"); return 0; }
