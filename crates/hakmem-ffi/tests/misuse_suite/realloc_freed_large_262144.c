/*
 * realloc() of a 256 KiB block that was already freed (a double free through
 * realloc).
 *
 * A stopping allocator aborts in realloc().
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(262144);
    memset(p, 0x11, 262144);
    free(p);
    char *volatile q = realloc(p, 524288); /* the misuse */
    misuse_done();
    (void)q;
    after_misuse_work();
    return reached_end();
}

