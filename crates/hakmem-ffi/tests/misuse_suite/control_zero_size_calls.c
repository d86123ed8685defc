/*
 * Control: what a program may do with zero-sized blocks: calloc(0, n) and
 * malloc(0) give pointers free() takes, malloc_usable_size() of one does
 * not fail, realloc(p, 0) of one frees it, and many live at once are all
 * distinct.
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

#define LIVE 5000

int main(void) {
    static char *held[LIVE];
    for (int i = 0; i < LIVE; i++) {
        held[i] = (i % 2) ? malloc(0) : calloc(0, 16);
        if (held[i] == NULL) {
            return EXIT_SETUP;
        }
        (void)malloc_usable_size(held[i]);
    }
    for (int i = 0; i < LIVE; i++) {
        for (int j = i + 1; j < i + 8 && j < LIVE; j++) {
            if (held[i] == held[j]) {
                return EXIT_OLD_DATA;
            }
        }
    }
    for (int i = 0; i < LIVE; i++) {
        if (i % 3 == 0) {
            (void)realloc(held[i], 0);
        } else {
            free(held[i]);
        }
    }
    return reached_end();
}
