/*
 * Hands a pointer that is not a live hakmem block to free, realloc or
 * malloc_usable_size. hakmem must recognise it, print a diagnostic that
 * starts with "hakmem: <function>(): " and abort (SIGABRT) instead of
 * corrupting memory; under HAKMEM_ON_ERROR=warn it prints the diagnostic
 * and ignores the call.
 *
 * Usage: foreign_pointer {free|realloc|realloc0|usable|free_sized} {stack|mmap|garbage|interior|freed|delayed}
 *        foreign_pointer misaligned
 *   stack     an address on the stack
 *   mmap      an address in a mapping of the program's own
 *   garbage   0x12345678
 *   interior  16 bytes into a live malloc'd block
 *   freed     a block already freed (just before)
 *   delayed   a block freed before 50 other frees of its size
 * The second form hands a live block to free_aligned_sized with an
 * alignment it does not have: reported like a bad pointer.
 * Prints "returned <value>" and exits 0 only if the call returned.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* C23; not declared (or, before glibc 2.43, defined) by glibc. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t align, size_t size);

#ifdef HAKMEM_LINKED
#define HK(name) (&name)
#else
#include <dlfcn.h>
static void *lookup(const char *name) {
    void *sym = dlsym(RTLD_DEFAULT, name);
    if (sym == NULL) {
        fprintf(stderr, "FATAL: %s is not resolvable: is libhakmem.so preloaded?\n", name);
        exit(2);
    }
    return sym;
}
#define HK(name) ((__typeof__(&name))lookup(#name))
#endif

static int misaligned(void) {
    /* Two 64-aligned blocks: at most one is also 1 MiB-aligned. */
    void *a = aligned_alloc(64, 100);
    void *p = aligned_alloc(64, 100);
    if (((uintptr_t)p & ((1u << 20) - 1)) == 0) p = a;
    fflush(stdout);
    HK(free_aligned_sized)(p, (size_t)1 << 20, 100);
    printf("returned\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "misaligned") == 0) {
        return misaligned();
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s {free|realloc|realloc0|usable|free_sized} {stack|mmap|garbage|interior|freed|delayed}\n", argv[0]);
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
    } else if (strcmp(argv[1], "free_sized") == 0) {
        HK(free_sized)(p, 8);
        printf("returned\n");
    } else {
        return 2;
    }
    return 0;
}
