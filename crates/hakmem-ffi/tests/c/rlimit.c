/*
 * Address-space exhaustion from C: with RLIMIT_AS at 512 MiB, malloc of
 * small, 1 MiB and 64 MiB blocks runs until it returns NULL with errno
 * ENOMEM (never a crash), and succeeds again once half is freed. The blocks
 * are chained through their first word. Prints "ok" and exits 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static int exhaust(size_t size) {
    void **head = NULL;
    size_t count = 0;
    for (;;) {
        errno = 0;
        void **p = malloc(size);
        if (p == NULL) {
            if (errno != ENOMEM) {
                fprintf(stderr, "size %zu: NULL with errno %d\n", size, errno);
                return 0;
            }
            break;
        }
        *p = head;
        head = p;
        count++;
    }
    if (count < 2) {
        fprintf(stderr, "size %zu: only %zu blocks\n", size, count);
        return 0;
    }
    for (size_t i = 0; i < count / 2; i++) {
        void **next = *head;
        free(head);
        head = next;
    }
    void *again = malloc(size);
    if (again == NULL) {
        fprintf(stderr, "size %zu: no block after freeing half\n", size);
        return 0;
    }
    free(again);
    while (head != NULL) {
        void **next = *head;
        free(head);
        head = next;
    }
    return 1;
}

int main(void) {
    struct rlimit limit = {512u << 20, 512u << 20};
    if (setrlimit(RLIMIT_AS, &limit) != 0) {
        perror("setrlimit");
        return 2;
    }
    size_t sizes[] = {64, 1u << 20, 64u << 20};
    for (int i = 0; i < 3; i++) {
        if (!exhaust(sizes[i])) {
            return 1;
        }
    }
    printf("ok\n");
    return 0;
}
