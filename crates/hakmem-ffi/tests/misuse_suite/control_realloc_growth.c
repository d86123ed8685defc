/*
 * Control: a block grown by realloc() from 8 B to 4 MiB, doubling each time,
 * then shrunk back to 8 B, keeps its contents at every step.
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

int main(void) {
    size_t size = 8;
    unsigned char *p = must_malloc(size);
    for (size_t i = 0; i < size; i++) {
        p[i] = (unsigned char)(i * 7 + 1);
    }
    while (size < ((size_t)4 << 20)) {
        unsigned char *q = realloc(p, size * 2);
        if (q == NULL) {
            return EXIT_SETUP;
        }
        for (size_t i = 0; i < size; i++) {
            if (q[i] != (unsigned char)(i * 7 + 1)) {
                return EXIT_OLD_DATA;
            }
        }
        for (size_t i = size; i < size * 2; i++) {
            q[i] = (unsigned char)(i * 7 + 1);
        }
        p = q;
        size *= 2;
    }
    while (size > 8) {
        size /= 2;
        unsigned char *q = realloc(p, size);
        if (q == NULL) {
            return EXIT_SETUP;
        }
        for (size_t i = 0; i < size; i++) {
            if (q[i] != (unsigned char)(i * 7 + 1)) {
                return EXIT_OLD_DATA;
            }
        }
        p = q;
    }
    free(p);
    return reached_end();
}

