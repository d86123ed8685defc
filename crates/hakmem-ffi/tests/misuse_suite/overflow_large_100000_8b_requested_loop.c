/*
 * Heap overflow of a 100000 B block by 8 B written with a byte loop at the
 * requested size 100000 (inside the allocator's rounding, if it rounds up);
 * then the block is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (canary or padding check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(100000);
    memset(p, 0x11, 100000);
    size_t end = 100000;
    for (size_t i = 0; i < 8; i++) {
        p[end + i] = 'X'; /* the misuse */
    }
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

