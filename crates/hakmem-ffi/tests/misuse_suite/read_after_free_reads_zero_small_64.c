/*
 * Read after free of a 64 B block, strictly: after free, every byte past
 * the first 16 (where allocators keep their free-list links) must read as
 * zero, not merely differ from what the program wrote.
 *
 * A stopping allocator zeroes freed blocks (or the read faults). Exit 3
 * means some byte of the freed block was not zero: whatever it holds (old
 * data, a fill pattern) is visible to a dangling pointer.
 */
// expect: zero
#include "misuse.h"

int main(void) {
    unsigned char *p = must_malloc(64);
    memset(p, 'a', 64);
    free(p);
    size_t nonzero = 0;
    for (size_t i = 16; i < 64; i++) { /* the misuse */
        nonzero += ((volatile unsigned char *)p)[i] != 0;
    }
    misuse_done();
    if (nonzero > 0) {
        return EXIT_OLD_DATA;
    }
    return reached_end();
}
