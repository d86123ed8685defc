/*
 * The heap profiler inside libgcc's unwinder (tests/profile.rs).
 *
 *   profile_in_unwinder unwind   registers unwind tables for 20 000 made-up
 *                                functions with __register_frame (as a JIT
 *                                compiler does), then walks its own stack
 *                                with backtrace() three times
 *   profile_in_unwinder start    allocates a few blocks and exits
 *
 * libgcc sorts the tables of registered code the first time it searches
 * them, under its own lock, and allocates the sorted array with malloc
 * (160 KB here). Run with HAKMEM_PROFILE at a short interval, that malloc
 * is sampled, and a profiler that looked its frames up with libgcc's
 * _Unwind_Find_FDE waited for the lock its own thread held: the program
 * hung. A fully static executable registers its own tables that way at
 * start-up, so there every backtrace() (and every C++ throw) sorts.
 *
 * "start", fully static: samples taken during glibc's own start-up, before
 * its tables of loaded objects were built, crashed the program.
 */
#include <execinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void __register_frame(void *begin);

/* Appends little-endian integers to a table being built. */
static unsigned char *put(unsigned char *at, uint64_t value, int bytes) {
    memcpy(at, &value, (size_t)bytes);
    return at + bytes;
}

/*
 * A .eh_frame-style table: one CIE (version 1, augmentation "zR", code
 * alignment 1, data alignment -8, return address column 16, absolute
 * pointers; CFA = rsp + 8, return address at CFA - 8) and `count` FDEs for
 * 32-byte functions at made-up addresses no code occupies, then the
 * terminating zero word. It stays registered until exit.
 */
static void register_made_up_functions(int count) {
    size_t bytes = 24 + (size_t)count * 28 + 4;
    unsigned char *table = calloc(1, bytes);
    if (table == NULL) {
        perror("calloc");
        exit(2);
    }
    unsigned char *at = table;
    at = put(at, 20, 4); /* CIE length */
    at = put(at, 0, 4);  /* CIE id */
    static const unsigned char cie[] = {
        1, 'z', 'R', 0, /* version, augmentation */
        1, 0x78, 16,    /* code align 1, data align -8 (SLEB), RA column */
        1, 0x00,        /* augmentation data: FDE pointers absolute */
        0x0c, 7, 8,     /* DW_CFA_def_cfa rsp, 8 */
        0x90, 1,        /* DW_CFA_offset r16 (RA), 1 * -8 */
        0, 0,           /* padding */
    };
    memcpy(at, cie, sizeof cie);
    at += sizeof cie;
    for (int i = 0; i < count; i++) {
        at = put(at, 24, 4);                           /* FDE length */
        at = put(at, (uint64_t)(at - table), 4);       /* back to the CIE */
        at = put(at, 0x10000000u + (uint64_t)i * 64, 8); /* start */
        at = put(at, 32, 8);                           /* size */
        at = put(at, 0, 1);                            /* no augmentation data */
        at = put(at, 0, 3);                            /* padding */
    }
    put(at, 0, 4);
    __register_frame(table);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "unwind") == 0) {
        register_made_up_functions(20000);
        for (int round = 0; round < 3; round++) {
            void *frames[64];
            int n = backtrace(frames, 64);
            if (n <= 0) {
                fprintf(stderr, "backtrace found no frame\n");
                return 1;
            }
        }
        printf("walked\n");
        return 0;
    }
    if (strcmp(mode, "start") == 0) {
        void *blocks[16];
        for (int i = 0; i < 16; i++) {
            blocks[i] = malloc((size_t)(i + 1) * 1000);
        }
        for (int i = 0; i < 16; i++) {
            free(blocks[i]);
        }
        printf("started\n");
        return 0;
    }
    fprintf(stderr, "usage: profile_in_unwinder unwind|start\n");
    return 2;
}
