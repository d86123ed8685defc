/*
 * free() of an interior pointer, 8 B into a 16 B block; the block itself
 * stays allocated.
 *
 * A stopping allocator aborts in that free() (invalid free).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(16);
    memset(p, 0x11, 16);
    free(p + 8); /* the misuse */
    misuse_done();
    after_misuse_work();
    free(p);
    return reached_end();
}

