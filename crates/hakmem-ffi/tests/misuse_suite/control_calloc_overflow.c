/*
 * Control: calloc() whose count times size overflows size_t returns NULL
 * with errno ENOMEM (a wrapped product would hand out a tiny block).
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

#include <errno.h>

int main(void) {
    static const size_t pairs[][2] = {{SIZE_MAX / 2 + 2, 2}, {(size_t)1 << 33, (size_t)1 << 33},
        {SIZE_MAX, SIZE_MAX}, {3, SIZE_MAX / 3 + 1}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        errno = 0;
        void *p = calloc(pairs[i][0], pairs[i][1]);
        if (p != NULL || errno != ENOMEM) {
            say(p != NULL ? "returned a block" : "errno is not ENOMEM");
            return EXIT_OLD_DATA;
        }
    }
    return reached_end();
}

