/*
 * free() of a pointer one byte into the block malloc(0) returned.
 *
 * A stopping allocator reports the pointer as invalid (it starts no
 * block).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = malloc(0);
    if (p == NULL) {
        return EXIT_SETUP;
    }
    free(p + 1); /* the misuse */
    misuse_done();
    free(p);
    after_misuse_work();
    return reached_end();
}
