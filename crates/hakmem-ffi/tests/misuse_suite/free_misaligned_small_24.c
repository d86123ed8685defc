/*
 * free() of an interior pointer, 1 B into a 24 B block (misaligned); the
 * block itself stays allocated.
 *
 * A stopping allocator aborts in that free() (invalid free).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(24);
    memset(p, 0x11, 24);
    free(p + 1); /* the misuse */
    misuse_done();
    after_misuse_work();
    free(p);
    return reached_end();
}

