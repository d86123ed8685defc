/*
 * realloc() of an interior pointer, 8 B into a 32 B block.
 *
 * A stopping allocator aborts in realloc() (invalid pointer).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(32);
    memset(p, 0x11, 32);
    char *volatile q = realloc(p + 8, 64); /* the misuse */
    misuse_done();
    (void)q;
    after_misuse_work();
    return reached_end();
}

