/*
 * malloc_usable_size() of a 48 B block after it was freed.
 *
 * A stopping allocator aborts in malloc_usable_size() (invalid pointer);
 * returning a size for it lets a program trust a bogus length.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(48);
    free(p);
    volatile size_t n = malloc_usable_size(p); /* the misuse */
    misuse_done();
    (void)n;
    after_misuse_work();
    return reached_end();
}

