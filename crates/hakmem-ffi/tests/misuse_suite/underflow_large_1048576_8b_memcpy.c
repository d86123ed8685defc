/*
 * Heap underflow of a 1 MiB block: 8 B written just before its start with
 * memcpy; then the block is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (header or canary check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(1048576);
    memset(p, 0x11, 1048576);
    memcpy(p - 8, "XXXXXXXX", 8); /* the misuse */
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

