/*
 * Control: calloc() returns zeroed memory even where a block of the same
 * size was just filled and freed (16 B to 1 MiB).
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

int main(void) {
    static const size_t sizes[] = {16, 100, 4096, 65536, 1048576};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        unsigned char *p = must_malloc(sizes[s]);
        memset(p, 0xff, sizes[s]);
        free(p);
        unsigned char *z = calloc(1, sizes[s]);
        if (z == NULL) {
            return EXIT_SETUP;
        }
        for (size_t i = 0; i < sizes[s]; i++) {
            if (z[i] != 0) {
                return EXIT_OLD_DATA;
            }
        }
        free(z);
    }
    return reached_end();
}

