/*
 * Hands a pointer that is not a live hakmem block to free, realloc or
 * malloc_usable_size. hakmem must recognise it, print a diagnostic that
 * starts with "hakmem: <function>(): " and abort (SIGABRT) instead of
 * corrupting memory; under HAKMEM_ON_ERROR=warn it prints the diagnostic
 * and ignores the call.
 *
 * Usage: foreign_pointer {free|realloc|realloc0|usable} {stack|mmap|garbage|interior|freed|delayed}
 *   stack     an address on the stack
 *   mmap      an address in a mapping of the program's own
 *   garbage   0x12345678
 *   interior  16 bytes into a live malloc'd block
 *   freed     a block already freed (just before)
 *   delayed   a block freed before 50 other frees of its size
 * Prints "returned <value>" and exits 0 only if the call returned.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s {free|realloc|realloc0|usable} {stack|mmap|garbage|interior|freed|delayed}\n", argv[0]);
        return 2;
    }
    /* volatile: keep the compiler from seeing (and warning about, or
     * removing) a free of a non-heap object. */
    char stack_buffer[64];
    void *volatile p;
    if (strcmp(argv[2], "stack") == 0) {
        p = stack_buffer + 16;
    } else if (strcmp(argv[2], "mmap") == 0) {
        void *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            perror("mmap");
            return 2;
        }
        p = (char *)m + 4096;
    } else if (strcmp(argv[2], "garbage") == 0) {
        p = (void *)(uintptr_t)0x12345678;
    } else if (strcmp(argv[2], "delayed") == 0) {
        void *others[50];
        p = malloc(100);
        for (int i = 0; i < 50; i++) {
            others[i] = malloc(100);
        }
        free(p);
        for (int i = 0; i < 50; i++) {
            free(others[i]);
        }
    } else if (strcmp(argv[2], "interior") == 0) {
        p = (char *)malloc(256) + 16;
    } else if (strcmp(argv[2], "freed") == 0) {
        /* Two blocks, so the freed one is not the only one on its page. */
        void *keep = malloc(100);
        p = malloc(100);
        free(p);
        (void)keep;
    } else {
        return 2;
    }
    fflush(stdout);

    if (strcmp(argv[1], "free") == 0) {
        free(p);
        printf("returned\n");
    } else if (strcmp(argv[1], "realloc") == 0) {
        printf("returned %s\n", realloc(p, 100) == NULL ? "NULL" : "a block");
    } else if (strcmp(argv[1], "realloc0") == 0) {
        printf("returned %s\n", realloc(p, 0) == NULL ? "NULL" : "a block");
    } else if (strcmp(argv[1], "usable") == 0) {
        printf("returned %zu\n", malloc_usable_size(p));
    } else {
        return 2;
    }
    return 0;
}
