/*
 * Uninitialised read: 16 blocks of 8 KiB are filled with a secret word and
 * freed, then 16 blocks of the same size are allocated and read before
 * anything is written to them.
 *
 * A stopping allocator hands out no block that still holds an earlier
 * block's data (zero on free or on allocation). Exit 3 means a new block
 * showed the secret.
 */
// expect: zero
#include "misuse.h"

int main(void) {
    static char *blocks[16];
    for (int i = 0; i < 16; i++) {
        blocks[i] = must_malloc(8192);
        fill_secret(blocks[i], 8192);
    }
    for (int i = 0; i < 16; i++) {
        free(blocks[i]);
    }
    for (int i = 0; i < 16; i++) {
        blocks[i] = must_malloc(8192);
    }
    size_t seen = 0;
    for (int i = 0; i < 16; i++) {
        seen += count_secret(blocks[i], 8192); /* the misuse */
    }
    misuse_done();
    for (int i = 0; i < 16; i++) {
        free(blocks[i]);
    }
    if (seen > 0) {
        return EXIT_OLD_DATA;
    }
    return reached_end();
}

