/*
 * Double free of a block malloc(0) returned, with other zero-sized blocks
 * allocated and freed in between.
 *
 * A stopping allocator reports the second free (its zero-sized blocks are
 * tracked like any other).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = malloc(0);
    if (p == NULL) {
        return EXIT_SETUP;
    }
    free(p);
    for (int i = 0; i < 10; i++) {
        free(malloc(0));
    }
    free(p); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}
