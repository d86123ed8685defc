/*
 * Heap overflow of a 24 B block by 8 B written with memcpy at
 * malloc_usable_size(p), the first byte past what the allocator says is
 * usable; then the block is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (canary or padding check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(24);
    memset(p, 0x11, 24);
    size_t end = malloc_usable_size(p);
    memcpy(p + end, "XXXXXXXX", 8); /* the misuse */
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

