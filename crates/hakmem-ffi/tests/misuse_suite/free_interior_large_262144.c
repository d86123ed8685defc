/*
 * free() of an interior pointer, 64 KiB into a 256 KiB block (page-aligned);
 * the block itself stays allocated.
 *
 * A stopping allocator aborts in that free() (invalid free).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(262144);
    memset(p, 0x11, 262144);
    free(p + 65536); /* the misuse */
    misuse_done();
    after_misuse_work();
    free(p);
    return reached_end();
}

