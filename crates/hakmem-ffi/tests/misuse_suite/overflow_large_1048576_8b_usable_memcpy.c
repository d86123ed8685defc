/*
 * Heap overflow of a 1 MiB block by 8 B written with memcpy at
 * malloc_usable_size(p), the first byte past what the allocator says is
 * usable; then the block is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (canary or padding check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(1048576);
    memset(p, 0x11, 1048576);
    size_t end = malloc_usable_size(p);
    memcpy(p + end, "XXXXXXXX", 8); /* the misuse */
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

