/*
 * A 64 B block is freed, then free() is called on a pointer 16 B into the
 * freed block.
 *
 * A stopping allocator aborts in the second free() (invalid free).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(64);
    memset(p, 0x11, 64);
    free(p);
    free(p + 16); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

