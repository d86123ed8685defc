/*
 * free() of an interior pointer, 4 KiB into an 8 KiB block (page-aligned);
 * the block itself stays allocated.
 *
 * A stopping allocator aborts in that free() (invalid free).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(8192);
    memset(p, 0x11, 8192);
    free(p + 4096); /* the misuse */
    misuse_done();
    after_misuse_work();
    free(p);
    return reached_end();
}

