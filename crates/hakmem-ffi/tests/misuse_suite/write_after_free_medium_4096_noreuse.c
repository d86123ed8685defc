/*
 * Write after free with no reuse: 8 B written 2048 B into a freed 4 KiB
 * block, then one allocation of an unrelated size (3000 B) and the program
 * exits.
 *
 * A stopping allocator faults on the write (freed memory unmapped or
 * protected); one that checks freed blocks only at reuse or at exit stops
 * late or not at all.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(4096);
    memset(p, 0x11, 4096);
    free(p);
    memcpy(p + 2048, "WWWWWWWW", 8); /* the misuse */
    misuse_done();
    say("AFTER_MISUSE_WORK");
    char *other = must_malloc(3000);
    other[0] = 1;
    free(other);
    return reached_end();
}

