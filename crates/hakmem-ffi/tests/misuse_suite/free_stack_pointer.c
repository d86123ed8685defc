/*
 * free() of a pointer to a 16-aligned array on the stack.
 *
 * A stopping allocator aborts in that free() (not a heap pointer).
 */
// expect: stop
#include "misuse.h"

int main(void) {
    _Alignas(64) char on_stack[256];
    memset(on_stack, 0x11, sizeof on_stack);
    free(on_stack + 64); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

