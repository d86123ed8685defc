/*
 * Delayed double free of a 32 KiB block: p is freed, then two other blocks
 * of the same size, then p again (p is no longer the last block freed, so a
 * check of the most recent free alone misses it).
 *
 * A stopping allocator aborts in the third free() of p.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(32768);
    char *q = must_malloc(32768);
    char *r = must_malloc(32768);
    free(p);
    free(q);
    free(r);
    free(p); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

