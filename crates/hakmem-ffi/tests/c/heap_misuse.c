/*
 * Misuses one heap block the way the programs the secure build is meant to
 * stop do: overflows and underflows by a write loop and by memcpy, writes
 * after free (found when the block is handed out again, or at exit), a
 * write through a dangling pointer while its block is free, and reads of
 * fresh and freed memory. Run with LD_PRELOAD=libhakmem_secure.so it must
 * end in a "hakmem: ..." report and SIGABRT, or in SIGSEGV on a guard page
 * inside the misusing write; "no-old-data" must exit 0.
 *
 * Usage: heap_misuse <misuse> <bytes> <size>
 *   overflow-write    a loop writes <bytes> bytes past the end, then free
 *   overflow-memcpy   memcpy of <size> + <bytes> bytes to the block, then free
 *   underflow-write   a loop writes <bytes> bytes before the start, downwards
 *   underflow-memcpy  memcpy of <bytes> + <size> bytes to <bytes> before it
 *   write-after-free  free, write <bytes> bytes at size/2, malloc until reused
 *   write-after-free-exit   the same, then exit without any malloc
 *   write-after-free-head, write-after-free-head-exit   the same two at
 *                     offset 24 (past the 16 bytes of a free block's link
 *                     and mark: in its first cache line)
 *   reuse             free; the next malloc of that size must be another
 *                     block (exit 3 if not); write <bytes> bytes through the
 *                     dangling pointer; malloc until reused
 *   no-old-data       <bytes> rounds of malloc, fill, free: a new block
 *                     never shows what an old one held (exit 3 if it does)
 *   no-old-data-calloc  the same with calloc
 * Prints "survived" and exits 0 when nothing stopped it.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps the compiler from reasoning about the misused pointer. */
static void *volatile launder_slot;
static unsigned char *launder(void *p) {
    launder_slot = p;
    return launder_slot;
}

static unsigned char *block(size_t size) {
    unsigned char *p = malloc(size);
    if (p == NULL) {
        fprintf(stderr, "FATAL: malloc(%zu) failed\n", size);
        exit(2);
    }
    memset(p, 'v', size);
    return p;
}

static void write_loop(unsigned char *p, long from, size_t len, int down) {
    volatile unsigned char *q = launder(p);
    for (size_t i = 0; i < len; i++) {
        long at = down ? from + (long)(len - 1 - i) : from + (long)i;
        q[at] = 'A';
    }
}

static void copy_to(unsigned char *p, long from, size_t len) {
    unsigned char *src = malloc(len);
    if (src == NULL) {
        exit(2);
    }
    memset(src, 'A', len);
    memcpy(launder(p) + from, src, len);
    /* src is not freed: freeing it would not tell anything new. */
}

static void allocate_until_reuse(size_t size) {
    for (int i = 0; i < 4096; i++) {
        launder(malloc(size));
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: heap_misuse <misuse> <bytes> <size>\n");
        return 2;
    }
    const char *misuse = argv[1];
    size_t bytes = strtoul(argv[2], NULL, 0);
    size_t size = strtoul(argv[3], NULL, 0);
    if (!strcmp(misuse, "overflow-write")) {
        unsigned char *p = block(size);
        write_loop(p, (long)size, bytes, 0);
        free(p);
    } else if (!strcmp(misuse, "overflow-memcpy")) {
        unsigned char *p = block(size);
        copy_to(p, 0, size + bytes);
        free(p);
    } else if (!strcmp(misuse, "underflow-write")) {
        unsigned char *p = block(size);
        write_loop(p, -(long)bytes, bytes, 1);
        free(p);
    } else if (!strcmp(misuse, "underflow-memcpy")) {
        unsigned char *p = block(size);
        copy_to(p, -(long)bytes, bytes + size);
        free(p);
    } else if (!strncmp(misuse, "write-after-free", strlen("write-after-free"))) {
        int head = strstr(misuse, "-head") != NULL;
        long at = head ? 24 : (long)(size / 2);
        unsigned char *p = block(size);
        free(p);
        write_loop(p, at, bytes < size - (size_t)at ? bytes : size - (size_t)at, 0);
        if (strstr(misuse, "-exit") != NULL) {
            exit(0);
        }
        allocate_until_reuse(size);
    } else if (!strcmp(misuse, "reuse")) {
        unsigned char *p = block(size);
        free(p);
        unsigned char *q = block(size);
        if (q == p) {
            printf("the freed block was handed out again at once\n");
            return 3;
        }
        write_loop(p, 0, bytes < size ? bytes : size, 0);
        allocate_until_reuse(size);
    } else if (!strcmp(misuse, "no-old-data") || !strcmp(misuse, "no-old-data-calloc")) {
        int zeroed = !strcmp(misuse, "no-old-data-calloc");
        unsigned char *p = block(size);
        memset(p, 'S', size);
        free(p);
        for (size_t round = 0; round < bytes; round++) {
            unsigned char *q = zeroed ? calloc(1, size) : malloc(size);
            if (q == NULL) {
                return 2;
            }
            if (memchr(q, 'S', size) != NULL || memchr(q, 'v', size) != NULL) {
                printf("a new block shows old data\n");
                return 3;
            }
            memset(q, 'S', size);
            free(q);
        }
    } else {
        fprintf(stderr, "unknown misuse %s\n", misuse);
        return 2;
    }
    printf("survived\n");
    return 0;
}
