/*
 * Write after free with no reuse: 8 B written 524288 B into a freed 1 MiB
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
    char *p = must_malloc(1048576);
    memset(p, 0x11, 1048576);
    free(p);
    memcpy(p + 524288, "WWWWWWWW", 8); /* the misuse */
    misuse_done();
    say("AFTER_MISUSE_WORK");
    char *other = must_malloc(3000);
    other[0] = 1;
    free(other);
    return reached_end();
}

