/*
 * Heap underflow of a 4 KiB block: 8 B written just before its start with a
 * byte loop; then the block is freed.
 *
 * A stopping allocator faults on the write (guard page) or aborts in the
 * free() that follows it (header or canary check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(4096);
    memset(p, 0x11, 4096);
    for (size_t i = 1; i <= 8; i++) {
        *(p - i) = 'X'; /* the misuse */
    }
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

