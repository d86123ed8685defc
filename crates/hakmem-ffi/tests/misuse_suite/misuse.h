/*
 * What every case of the misuse suite shares: the markers and exit codes
 * that scripts/misuse-suite reads, and the allocation work done after a
 * misuse.
 *
 * Markers, in the order a case prints them:
 *   MISUSE_DONE        the misusing statement itself has run;
 *   AFTER_MISUSE_WORK  the case's own check point (the free() after an
 *                      overflow, the reuse loop after a write after free)
 *                      has run too, and unrelated allocation work begins: an
 *                      allocator that stops the program from here on noticed
 *                      the misuse only later ("late");
 *   REACHED_END        main is about to return 0.
 * They are written with write(2), not stdio, so printing one allocates
 * nothing and leaves the heap as the case set it up.
 *
 * Exit codes other than 0: EXIT_SETUP when an allocation the case needs
 * failed (no verdict on the allocator), EXIT_OLD_DATA when an "expect: zero"
 * case saw old data or an "expect: ok" control found a wrong result.
 */
#ifndef MISUSE_H
#define MISUSE_H

#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_SETUP 2
#define EXIT_OLD_DATA 3

/* The word "expect: zero" cases write into a block before it is freed. */
#define SECRET_WORD 0x5ec2e7da7a5ec2e7ULL

static inline void say(const char *line) {
    size_t n = strlen(line);
    while (n > 0) {
        ssize_t w = write(1, line, n);
        if (w <= 0) {
            break;
        }
        line += w;
        n -= (size_t)w;
    }
    (void)!write(1, "\n", 1);
}

static inline void misuse_done(void) { say("MISUSE_DONE"); }

static inline int reached_end(void) {
    say("REACHED_END");
    return 0;
}

static inline void *must_malloc(size_t size) {
    void *p = malloc(size);
    if (p == NULL) {
        say("SETUP_FAILED");
        _exit(EXIT_SETUP);
    }
    return p;
}

static inline void fill_secret(void *p, size_t size) {
    uint64_t *w = p;
    for (size_t i = 0; i < size / 8; i++) {
        w[i] = SECRET_WORD;
    }
}

/* How many aligned words of the block still hold the secret. */
static inline size_t count_secret(const void *p, size_t size) {
    const volatile uint64_t *w = p;
    size_t seen = 0;
    for (size_t i = 0; i < size / 8; i++) {
        if (w[i] == SECRET_WORD) {
            seen++;
        }
    }
    return seen;
}

/*
 * Allocation work unrelated to the misuse, after it: a few rounds over
 * small, medium and large sizes, each block written and freed again, so an
 * allocator that checks blocks or free lists when it hands them out or
 * takes them back gets the chance to notice.
 */
static inline void after_misuse_work(void) {
    static const size_t sizes[] = {8,    16,   24,    32,    48,    64,     100,    128,
                                   256,  512,  1024,  2048,  4096,  8192,   16384,  32768,
                                   65536, 131072, 262144, 1048576};
    enum { N_SIZES = sizeof sizes / sizeof sizes[0], PER_SIZE = 64 };
    static void *held[PER_SIZE];
    say("AFTER_MISUSE_WORK");
    for (int round = 0; round < 4; round++) {
        for (size_t s = 0; s < N_SIZES; s++) {
            size_t count = sizes[s] >= 65536 ? 4 : PER_SIZE;
            for (size_t i = 0; i < count; i++) {
                held[i] = must_malloc(sizes[s]);
                memset(held[i], (int)(i + 1), sizes[s]);
            }
            for (size_t i = 0; i < count; i++) {
                free(held[i]);
            }
        }
    }
}

#endif
