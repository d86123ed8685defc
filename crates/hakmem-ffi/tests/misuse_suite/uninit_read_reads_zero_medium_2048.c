/*
 * Uninitialised read, strictly: a 2048 B block freshly returned by malloc,
 * after an earlier block of that size was written and freed, must read as
 * zero in every byte past its first 16.
 *
 * A stopping allocator hands out blocks zeroed (it zeroes on free or on
 * allocation). Exit 3 means some byte was not zero: uninitialised reads
 * see whatever the allocator or an earlier owner left.
 */
// expect: zero
#include "misuse.h"

int main(void) {
    for (int i = 0; i < 64; i++) {
        unsigned char *q = must_malloc(2048);
        memset(q, 0x5a, 2048);
        free(q);
    }
    unsigned char *p = must_malloc(2048);
    size_t nonzero = 0;
    for (size_t i = 16; i < 2048; i++) { /* the misuse */
        nonzero += ((volatile unsigned char *)p)[i] != 0;
    }
    misuse_done();
    free(p);
    if (nonzero > 0) {
        return EXIT_OLD_DATA;
    }
    return reached_end();
}
