/*
 * Heap overflow of a 16 B block by 1 B written with a byte loop at
 * malloc_usable_size(p), the first byte past what the allocator says is
 * usable; then the block is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (canary or padding check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(16);
    memset(p, 0x11, 16);
    size_t end = malloc_usable_size(p);
    for (size_t i = 0; i < 1; i++) {
        p[end + i] = 'X'; /* the misuse */
    }
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

