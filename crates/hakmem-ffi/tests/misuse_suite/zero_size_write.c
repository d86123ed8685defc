/*
 * Write of one byte through the pointer malloc(0) returned, then free().
 *
 * A stopping allocator faults on the write (PROT_NONE zero-size region) or
 * aborts in the free() (canary check).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = malloc(0);
    *(volatile char *)p = 'X'; /* the misuse */
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}

