/*
 * free() of a pointer into a static array that no allocator handed out.
 *
 * A stopping allocator aborts in that free() (not a heap pointer).
 */
// expect: stop
#include "misuse.h"

static _Alignas(4096) char area[16384];

int main(void) {
    area[0] = 1;
    free(area + 4096); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

