/*
 * Control: posix_memalign() and aligned_alloc() at alignments 16 B to 1 MiB
 * return aligned blocks of at least the size asked that can be written and
 * freed.
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

int main(void) {
    for (size_t align = 16; align <= ((size_t)1 << 20); align *= 4) {
        void *p = NULL;
        if (posix_memalign(&p, align, align + 24) != 0) {
            return EXIT_SETUP;
        }
        char *q = aligned_alloc(align, align * 2);
        if (q == NULL) {
            return EXIT_SETUP;
        }
        if ((uintptr_t)p % align != 0 || (uintptr_t)q % align != 0 ||
        malloc_usable_size(p) < align + 24 || malloc_usable_size(q) < align * 2) {
            return EXIT_OLD_DATA;
        }
        memset(p, 0x44, align + 24);
        memset(q, 0x44, align * 2);
        free(p);
        free(q);
    }
    return reached_end();
}

