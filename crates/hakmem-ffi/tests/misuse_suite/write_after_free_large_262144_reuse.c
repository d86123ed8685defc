/*
 * Write after free: 8 B written 131072 B into a freed 256 KiB block (not its
 * first word), then 3000 blocks of the same size are allocated and freed, so
 * the freed block is handed out again.
 *
 * A stopping allocator faults on the write (freed memory unmapped or
 * protected) or aborts when it checks that the freed block is still as it
 * left it (zeroed or poisoned) before handing it out again.
 */
// expect: stop
#include "misuse.h"

int main(void) {
    char *p = must_malloc(262144);
    memset(p, 0x11, 262144);
    free(p);
    memcpy(p + 131072, "WWWWWWWW", 8); /* the misuse */
    misuse_done();
    for (int i = 0; i < 3000; i++) {
        char *q = must_malloc(262144);
        q[0] = 1;
        free(q);
    }
    after_misuse_work();
    return reached_end();
}

