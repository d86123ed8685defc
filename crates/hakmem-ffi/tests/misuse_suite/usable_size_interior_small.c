/*
 * malloc_usable_size() of an interior pointer, 8 B into a 48 B block.
 *
 * A stopping allocator aborts in malloc_usable_size() (invalid pointer);
 * returning a size for it lets a program trust a bogus length.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(48);
    volatile size_t n = malloc_usable_size(p + 8); /* the misuse */
    misuse_done();
    (void)n;
    after_misuse_work();
    return reached_end();
}

