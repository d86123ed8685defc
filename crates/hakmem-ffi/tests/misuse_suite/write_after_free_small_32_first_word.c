/*
 * Write after free into the first word of a freed 32 B block (where many
 * allocators keep the free-list link): three other 32 B blocks are freed
 * first, then p, so p heads a free list with more behind it; p's first word
 * is set to a made-up address, then four 32 B blocks are allocated and
 * written.
 *
 * A stopping allocator faults on the write, or aborts when it pops p (free-
 * list integrity check, or a check that the freed block is unchanged),
 * before it hands out the made-up address.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *others[3];
    for (int i = 0; i < 3; i++) {
        others[i] = must_malloc(32);
    }
    char *p = must_malloc(32);
    memset(p, 0x11, 32);
    for (int i = 0; i < 3; i++) {
        free(others[i]);
    }
    free(p);
    *(volatile uint64_t *)p = 0x0000414141414140ULL; /* the misuse */
    misuse_done();
    char *again[4];
    for (int i = 0; i < 4; i++) {
        again[i] = must_malloc(32);
        memset(again[i], 0x22, 32);
    }
    for (int i = 0; i < 4; i++) {
        free(again[i]);
    }
    after_misuse_work();
    return reached_end();
}

