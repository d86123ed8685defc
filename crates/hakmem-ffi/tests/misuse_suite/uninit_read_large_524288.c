/*
 * Uninitialised read: 4 blocks of 512 KiB are filled with a secret word and
 * freed, then 4 blocks of the same size are allocated and read before
 * anything is written to them.
 *
 * A stopping allocator hands out no block that still holds an earlier
 * block's data (zero on free or on allocation). Exit 3 means a new block
 * showed the secret.
 */
// expect: zero
#include "misuse.h"

int main(void) {
    static char *blocks[4];
    for (int i = 0; i < 4; i++) {
        blocks[i] = must_malloc(524288);
        fill_secret(blocks[i], 524288);
    }
    for (int i = 0; i < 4; i++) {
        free(blocks[i]);
    }
    for (int i = 0; i < 4; i++) {
        blocks[i] = must_malloc(524288);
    }
    size_t seen = 0;
    for (int i = 0; i < 4; i++) {
        seen += count_secret(blocks[i], 524288); /* the misuse */
    }
    misuse_done();
    for (int i = 0; i < 4; i++) {
        free(blocks[i]);
    }
    if (seen > 0) {
        return EXIT_OLD_DATA;
    }
    return reached_end();
}

