/*
 * Read after free of a 100 B block: the block is filled with a secret word,
 * freed, and read again through the dangling pointer.
 *
 * A stopping allocator shows none of the secret: it zeroes freed blocks, or
 * the read faults (freed memory unmapped or protected). Exit 3 means the
 * secret was still there.
 */
// expect: zero
#include "misuse.h"

int main(void) {
    char *p = must_malloc(100);
    fill_secret(p, 100);
    free(p);
    size_t seen = count_secret(p, 100); /* the misuse */
    misuse_done();
    if (seen > 0) {
        return EXIT_OLD_DATA;
    }
    return reached_end();
}

