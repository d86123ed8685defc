/*
 * free() of the start of a 64 KiB mapping the program made itself with
 * mmap(); page-aligned, so it looks like a large block.
 *
 * A stopping allocator aborts in that free() (never allocated by it).
 */
// expect: stop
#include "misuse.h"

#include <sys/mman.h>

int main(void) {
    char *page = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        return EXIT_SETUP;
    }
    page[0] = 1;
    free(page); /* the misuse */
    misuse_done();
    after_misuse_work();
    return reached_end();
}

