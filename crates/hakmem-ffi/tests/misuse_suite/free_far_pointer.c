/*
 * free() of a 16-aligned pointer 256 MiB past a small block: an address near
 * the heap that no block covers.
 *
 * A stopping allocator aborts in that free() (invalid free), or faults
 * looking up its metadata.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(64);
    free(p + ((size_t)256 << 20)); /* the misuse */
    misuse_done();
    after_misuse_work();
    free(p);
    return reached_end();
}

