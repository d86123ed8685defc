/*
 * Heap underflow of a 256 KiB block: 1 B written just before its start with
 * a byte loop; then the block is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (header or canary check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(262144);
    memset(p, 0x11, 262144);
    for (size_t i = 1; i <= 1; i++) {
        *(p - i) = 'X'; /* the misuse */
    }
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

