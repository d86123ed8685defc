/*
 * Control: free(malloc(0)) 1000 times, and realloc() of a malloc(0) block to
 * 64 B gives a usable block.
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

int main(void) {
    for (int i = 0; i < 1000; i++) {
        free(malloc(0));
    }
    char *p = malloc(0);
    char *q = realloc(p, 64);
    if (q == NULL) {
        return EXIT_OLD_DATA;
    }
    memset(q, 0x33, 64);
    free(q);
    return reached_end();
}

