/*
 * C-string overflow of a 100 B block: the whole usable size is filled with
 * 'a' and no terminator, then strlen() runs off its end. The neighbouring
 * blocks of the same size are filled with 'b' so whatever lies past the
 * block is nonzero where the allocator leaves it so.
 *
 * A stopping allocator keeps a zero byte right after the usable size
 * (hardened_malloc's canary begins with one), so strlen() returns the usable
 * size, or faults on a guard page. Exit 3 means strlen() read past the
 * block.
 */
// expect: zero
#include "misuse.h"

int main(void) {
    char *around[8];
    for (int i = 0; i < 4; i++) {
        around[i] = must_malloc(100);
        memset(around[i], 'b', malloc_usable_size(around[i]));
    }
    char *p = must_malloc(100);
    for (int i = 4; i < 8; i++) {
        around[i] = must_malloc(100);
        memset(around[i], 'b', malloc_usable_size(around[i]));
    }
    size_t usable = malloc_usable_size(p);
    memset(p, 'a', usable);
    size_t len = strlen(p); /* the misuse */
    misuse_done();
    if (len != usable) {
        return EXIT_OLD_DATA;
    }
    free(p);
    for (int i = 0; i < 8; i++) {
        free(around[i]);
    }
    return reached_end();
}

