/*
 * Control: blocks resized by realloc up and down within and across size
 * classes (where an allocator may resize in place), written to their full
 * new size each time, their contents kept, freed with their neighbours
 * live and then freed too.
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

#define N 64

int main(void) {
    static const size_t steps[] = {100, 90, 111, 120, 64, 127, 17, 31, 32, 1000, 960, 1023, 4000, 4095, 3000};
    unsigned char *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = must_malloc(100);
        memset(b[i], i, 100);
    }
    size_t have = 100;
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        size_t size = steps[s];
        for (int i = 0; i < N; i += 2) {
            unsigned char *q = realloc(b[i], size);
            if (q == NULL) {
                return EXIT_SETUP;
            }
            size_t kept = have < size ? have : size;
            for (size_t j = 0; j < kept; j++) {
                if (q[j] != (unsigned char)(i + s)) {
                    return EXIT_OLD_DATA;
                }
            }
            memset(q, i + s + 1, size);
            b[i] = q;
        }
        have = size;
    }
    for (int i = 1; i < N; i += 2) {
        free(b[i]);
    }
    for (int i = 0; i < N; i += 2) {
        free(b[i]);
    }
    return reached_end();
}
