/*
 * Control: zero-sized blocks while large blocks (48 KiB to 3 MiB, which
 * hardened allocators give mappings of their own) are live: for each size,
 * 1 to 5 large blocks, then malloc(0) and calloc(0, 8), their
 * malloc_usable_size, a realloc of one to a real size, and every block
 * freed. A hardened allocator that keeps zero-sized blocks in a region of
 * their own must know them wherever the kernel put that region (hakmem
 * secure before 2026-11-27 aborted here: its region shared a 2 MiB window
 * with a large block's mapping, and free() took the pointer for a bad
 * one).
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

int main(void) {
    static const size_t sizes[] = {50000, 100000, 300000, 700000, 1100000, 3 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int n = 1; n <= 5; n++) {
            void *large[5];
            for (int i = 0; i < n; i++) {
                large[i] = must_malloc(sizes[s]);
                memset(large[i], i, 64);
            }
            char *z = malloc(0);
            char *c = calloc(0, 8);
            if (z == NULL || c == NULL) {
                return EXIT_SETUP;
            }
            (void)malloc_usable_size(z);
            (void)malloc_usable_size(c);
            char *grown = realloc(c, 24);
            if (grown == NULL) {
                return EXIT_SETUP;
            }
            memset(grown, 'x', 24);
            free(grown);
            free(z);
            for (int i = 0; i < n; i++) {
                free(large[i]);
            }
        }
    }
    return reached_end();
}
