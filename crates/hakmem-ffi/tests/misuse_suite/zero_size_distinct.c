/*
 * Control: two live malloc(0) blocks are two different pointers (or NULL,
 * which C allows).
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

int main(void) {
    char *a = malloc(0);
    char *b = malloc(0);
    if (a != NULL && a == b) {
        return EXIT_OLD_DATA;
    }
    free(a);
    free(b);
    return reached_end();
}

