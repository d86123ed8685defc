/*
 * realloc() of a pointer to an array on the stack.
 *
 * A stopping allocator aborts in realloc() (not a heap pointer).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    _Alignas(64) char on_stack[128];
    memset(on_stack, 0x11, sizeof on_stack);
    char *volatile q = realloc(on_stack, 256); /* the misuse */
    misuse_done();
    (void)q;
    after_misuse_work();
    return reached_end();
}

