/*
 * Uninitialised read: 64 blocks of 24 B are filled with a secret word and
 * freed, then 64 blocks of the same size are allocated and read before
 * anything is written to them.
 *
 * A stopping allocator hands out no block that still holds an earlier
 * block's data (zero on free or on allocation). Exit 3 means a new block
 * showed the secret.
 */
// expect: zero
#include "misuse.h"

int main(void) {
    static char *blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = must_malloc(24);
        fill_secret(blocks[i], 24);
    }
    for (int i = 0; i < 64; i++) {
        free(blocks[i]);
    }
    for (int i = 0; i < 64; i++) {
        blocks[i] = must_malloc(24);
    }
    size_t seen = 0;
    for (int i = 0; i < 64; i++) {
        seen += count_secret(blocks[i], 24); /* the misuse */
    }
    misuse_done();
    for (int i = 0; i < 64; i++) {
        free(blocks[i]);
    }
    if (seen > 0) {
        return EXIT_OLD_DATA;
    }
    return reached_end();
}

