/*
 * Heap overflow of a 8 B block by 8 B written with memcpy at the requested
 * size 8 (inside the allocator's rounding, if it rounds up); then the block
 * is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (canary or padding check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(8);
    memset(p, 0x11, 8);
    size_t end = 8;
    memcpy(p + end, "XXXXXXXX", 8); /* the misuse */
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

