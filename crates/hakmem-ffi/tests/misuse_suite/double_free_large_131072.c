/*
 * Double free of a 128 KiB block: free(p) twice in a row.
 *
 * A stopping allocator aborts in the second free().
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(131072);
    memset(p, 0x11, 131072);
    free(p);
    free(p); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

