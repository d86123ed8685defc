/*
 * realloc() of a 32 B block that was already freed (a double free through
 * realloc).
 *
 * A stopping allocator aborts in realloc().
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(32);
    memset(p, 0x11, 32);
    free(p);
    char *volatile q = realloc(p, 64); /* the misuse */
    misuse_done();
    (void)q;
    after_misuse_work();
    return reached_end();
}

