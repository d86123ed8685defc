/*
 * Double free of a 16 B block long after the first free: between the two
 * frees, 2000 blocks of another size (4000 B) are allocated and freed, so a
 * short quarantine has long moved on.
 *
 * A stopping allocator aborts in the second free(p): p is still free, never
 * handed out again.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(16);
    free(p);
    for (int i = 0; i < 2000; i++) {
        char *other = must_malloc(4000);
        other[0] = 1;
        free(other);
    }
    free(p); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

