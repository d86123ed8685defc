/*
 * malloc_usable_size() of a pointer to an array on the stack.
 *
 * A stopping allocator aborts in malloc_usable_size() (invalid pointer);
 * returning a size for it lets a program trust a bogus length.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    _Alignas(64) char on_stack[128];
    volatile size_t n = malloc_usable_size(on_stack); /* the misuse */
    misuse_done();
    (void)n;
    after_misuse_work();
    return reached_end();
}

