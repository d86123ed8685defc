/*
 * A 512 KiB block is freed, then free() is called on a pointer 8192 B into
 * the freed block.
 *
 * A stopping allocator aborts in the second free() (invalid free).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(524288);
    memset(p, 0x11, 524288);
    free(p);
    free(p + 8192); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

