/*
 * Read of one byte through the pointer malloc(0) returned.
 *
 * A stopping allocator returns a pointer to memory no one may touch
 * (hardened_malloc: a PROT_NONE region), so the read faults.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = malloc(0);
    volatile char c = *(volatile char *)p; /* the misuse */
    misuse_done();
    (void)c;
    free(p);
    after_misuse_work();
    return reached_end();
}

