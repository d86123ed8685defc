/*
 * Control: malloc() of sizes no process can have (SIZE_MAX, SIZE_MAX - 4095,
 * PTRDIFF_MAX, 2^62, 2^47) returns NULL with errno ENOMEM instead of
 * crashing or wrapping around.
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"

#include <errno.h>

int main(void) {
    static const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 4095, PTRDIFF_MAX, (size_t)1 << 62,
        (size_t)1 << 47};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        errno = 0;
        void *p = malloc(sizes[i]);
        if (p != NULL || errno != ENOMEM) {
            say(p != NULL ? "returned a block" : "errno is not ENOMEM");
            return EXIT_OLD_DATA;
        }
    }
    return reached_end();
}

