/*
 * Edge cases of every allocator function libhakmem exports, checked against
 * glibc 2.36's documented and observed behaviour.
 *
 * Built two ways by tests/c_api.rs:
 *   - plain, run with LD_PRELOAD=libhakmem.so: hakmem-only symbols (and the
 *     glibc aliases, which new programs cannot link against) are looked up
 *     with dlsym(RTLD_DEFAULT, ...), and each exported symbol is checked to
 *     come from libhakmem.so;
 *   - with -DHAKMEM_LINKED and libhakmem.a linked in: called directly.
 *
 * Prints "edge_cases: N checks, F failures" and exits non-zero on failure;
 * each failure is reported on stderr with its line.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "hakmem.h"

/* The impossible sizes below are the point of the test, and gcc cannot tell
 * a failed reallocarray (block still valid) from a successful one. */
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#pragma GCC diagnostic ignored "-Wuse-after-free"
/* mallinfo is deprecated in favour of mallinfo2; libhakmem exports both. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#ifndef HAKMEM_EXPECTED_VERSION
#error "build with -DHAKMEM_EXPECTED_VERSION=\"x.y.z\""
#endif

/* Not declared by glibc 2.36's headers. */
void cfree(void *p);
void *__libc_malloc(size_t size);
void __libc_free(void *p);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
/* C23; glibc 2.36 neither declares nor defines them. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t align, size_t size);

static int checks;
static int failures;

#define CHECK(cond)                                                                \
    do {                                                                           \
        checks++;                                                                  \
        if (!(cond)) {                                                             \
            failures++;                                                            \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
        }                                                                          \
    } while (0)

/* A call that must fail with NULL and errno == err. */
#define CHECK_FAILS(call, err)                                                     \
    do {                                                                           \
        errno = 0;                                                                 \
        void *failed_ = (call);                                                    \
        checks++;                                                                  \
        if (failed_ != NULL || errno != (err)) {                                   \
            failures++;                                                            \
            fprintf(stderr, "FAIL %s:%d: %s gave %p errno %d, want NULL errno %d\n", \
                    __FILE__, __LINE__, #call, failed_, errno, (err));             \
        }                                                                          \
    } while (0)

#define PTRDIFF_MAX_SIZE ((size_t)PTRDIFF_MAX)
#define OS_PAGE 4096u
/* errno value no allocator function sets: a successful call must keep it. */
#define ERRNO_SENTINEL 4242

#ifdef HAKMEM_LINKED
#define HK(name) (&name)
#else
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

static int is_aligned(const void *p, size_t align) {
    return ((uintptr_t)p & (align - 1)) == 0;
}

/* Fills [p, p + n) with a pattern derived from seed. */
static void fill(void *p, size_t n, unsigned seed) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 31 + seed);
}

/* Whether [p, p + n) still holds fill(p, n, seed)'s pattern. */
static int holds(const void *p, size_t n, unsigned seed) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != (unsigned char)(i * 31 + seed)) return 0;
    }
    return 1;
}

static int all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != 0) return 0;
    }
    return 1;
}

/* A freshly allocated block of `size` bytes: owned by hakmem, usable for at
 * least `size` bytes (written end to end), aligned to `align`. */
static void check_block(void *p, size_t size, size_t align) {
    CHECK(p != NULL);
    if (p == NULL) return;
    CHECK(is_aligned(p, align));
    CHECK(HK(hakmem_owns)(p));
    CHECK(malloc_usable_size(p) >= size);
    memset(p, 0xa5, size);
}

static void test_loaded(void) {
    const char *version = HK(hakmem_version)();
    CHECK(version != NULL && strcmp(version, HAKMEM_EXPECTED_VERSION) == 0);

    int on_stack = 0;
    CHECK(!HK(hakmem_owns)(&on_stack));
    CHECK(!HK(hakmem_owns)(NULL));
    void *p = malloc(10);
    CHECK(HK(hakmem_owns)(p));
    free(p);
    /* glibc's own allocations (strdup calls malloc inside libc) reach hakmem. */
    char *s = strdup("hakmem");
    CHECK(s != NULL && HK(hakmem_owns)(s));
    free(s);

#ifndef HAKMEM_LINKED
    /* Every exported name resolves into libhakmem.so (or the hardened
     * libhakmem_secure.so), not libc.so.6. */
    static const char *const names[] = {
        "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
        "aligned_alloc", "memalign", "valloc", "pvalloc", "malloc_usable_size",
        "cfree", "malloc_trim", "__libc_malloc", "__libc_free", "__libc_calloc",
        "__libc_realloc", "__libc_memalign", "__libc_valloc", "__libc_pvalloc",
        "hakmem_version", "hakmem_owns", "hakmem_os_counters", "hakmem_collect",
        "hakmem_stats_print", "hakmem_stats_json", "free_sized", "free_aligned_sized",
        "mallinfo2", "mallinfo", "malloc_stats", "malloc_info",
        "hakmem_heap_new", "hakmem_heap_malloc", "hakmem_heap_calloc", "hakmem_heap_realloc",
        "hakmem_heap_delete", "hakmem_heap_destroy",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        Dl_info info;
        void *sym = dlsym(RTLD_DEFAULT, names[i]);
        int ok = sym != NULL && dladdr(sym, &info) != 0 && info.dli_fname != NULL &&
                 (strstr(info.dli_fname, "libhakmem.so") != NULL ||
                  strstr(info.dli_fname, "libhakmem_secure.so") != NULL);
        checks++;
        if (!ok) {
            failures++;
            fprintf(stderr, "FAIL: %s does not resolve to libhakmem.so\n", names[i]);
        }
    }
#endif
}

static void test_malloc(void) {
    for (size_t size = 0; size <= 2100; size++) {
        void *p = malloc(size);
        check_block(p, size, 16);
        free(p);
    }
    for (size_t size = 2048; size <= ((size_t)64 << 20); size *= 2) {
        size_t sizes[] = {size - 1, size, size + 1, size + size / 2};
        for (size_t i = 0; i < 4; i++) {
            void *p = malloc(sizes[i]);
            check_block(p, sizes[i], 16);
            free(p);
        }
    }

    /* malloc(0) is a unique, freeable block, not a shared sentinel. */
    void *z1 = malloc(0), *z2 = malloc(0);
    CHECK(z1 != NULL && z2 != NULL && z1 != z2);
    free(z1);
    free(z2);

    /* Many live blocks at once do not overlap. */
    enum { LIVE = 3000 };
    static void *live[LIVE];
    static size_t live_size[LIVE];
    unsigned rng = 12345;
    for (int i = 0; i < LIVE; i++) {
        rng = rng * 1103515245u + 12345u;
        live_size[i] = (rng >> 8) % (i % 50 == 0 ? 300000 : 2000);
        live[i] = malloc(live_size[i]);
        CHECK(live[i] != NULL);
        fill(live[i], live_size[i], (unsigned)i);
    }
    for (int i = 0; i < LIVE; i++) {
        CHECK(holds(live[i], live_size[i], (unsigned)i));
        free(live[i]);
    }

    /* A successful malloc leaves errno alone. */
    errno = ERRNO_SENTINEL;
    void *p = malloc(100);
    void *q = malloc((size_t)3 << 20);
    CHECK(errno == ERRNO_SENTINEL);
    free(p);
    free(q);
    CHECK(errno == ERRNO_SENTINEL);

    /* Sizes above PTRDIFF_MAX (and ones that cannot be had) fail with ENOMEM. */
    CHECK_FAILS(malloc(SIZE_MAX), ENOMEM);
    CHECK_FAILS(malloc(SIZE_MAX - 4096), ENOMEM);
    CHECK_FAILS(malloc(PTRDIFF_MAX_SIZE + 1), ENOMEM);
    CHECK_FAILS(malloc(PTRDIFF_MAX_SIZE), ENOMEM);
    CHECK_FAILS(HK(__libc_malloc)(SIZE_MAX), ENOMEM);

    p = HK(__libc_malloc)(77);
    check_block(p, 77, 16);
    HK(__libc_free)(p);
}

static void test_free(void) {
    errno = ERRNO_SENTINEL;
    free(NULL);
    HK(cfree)(NULL);
    HK(__libc_free)(NULL);
    CHECK(errno == ERRNO_SENTINEL);
    HK(cfree)(malloc(100));
    HK(__libc_free)(malloc(100));
    /* Freeing one block leaves its neighbours intact. */
    void *a = malloc(48), *b = malloc(48), *c = malloc(48);
    fill(a, 48, 1);
    fill(c, 48, 3);
    free(b);
    CHECK(holds(a, 48, 1) && holds(c, 48, 3));
    free(a);
    free(c);
}

static void test_calloc(void) {
    static const size_t sizes[] = {1, 8, 15, 16, 24, 100, 1000, 1024, 4000, 4096, 65535, 65536,
                                   100000, (size_t)1 << 20, (size_t)3 << 20, (size_t)5 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i];
        for (int round = 0; round < 3; round++) {
            /* Dirty memory of this size first, so calloc must really zero. */
            void *dirty[4];
            for (int k = 0; k < 4; k++) {
                dirty[k] = malloc(size);
                memset(dirty[k], 0xff, size);
            }
            for (int k = 0; k < 4; k++) free(dirty[k]);
            unsigned char *p = calloc(1, size);
            CHECK(p != NULL && all_zero(p, size) && malloc_usable_size(p) >= size);
            unsigned char *q = calloc(size, 1);
            CHECK(q != NULL && all_zero(q, size));
            unsigned char *r = HK(__libc_calloc)(size, 1);
            CHECK(r != NULL && all_zero(r, size));
            memset(p, 0xff, size);
            memset(q, 0xff, size);
            memset(r, 0xff, size);
            free(p);
            free(q);
            free(r);
        }
    }
    void *p = calloc(37, 41);
    CHECK(p != NULL && all_zero(p, 37 * 41));
    free(p);

    /* Zero elements or zero size: a unique freeable block. */
    void *a = calloc(0, 0), *b = calloc(0, 10), *c = calloc(10, 0);
    CHECK(a != NULL && b != NULL && c != NULL && a != b && b != c && a != c);
    free(a);
    free(b);
    free(c);

    errno = ERRNO_SENTINEL;
    p = calloc(100, 100);
    CHECK(errno == ERRNO_SENTINEL);
    free(p);

    /* Overflowing products and sizes above PTRDIFF_MAX: ENOMEM, no abort. */
    CHECK_FAILS(calloc(SIZE_MAX, 2), ENOMEM);
    CHECK_FAILS(calloc(2, SIZE_MAX), ENOMEM);
    CHECK_FAILS(calloc((size_t)1 << 32, (size_t)1 << 32), ENOMEM);
    CHECK_FAILS(calloc(SIZE_MAX / 2 + 1, 2), ENOMEM);
    CHECK_FAILS(calloc(SIZE_MAX / 3 + 1, 3), ENOMEM);
    CHECK_FAILS(calloc(PTRDIFF_MAX_SIZE / 2 + 1, 2), ENOMEM);
    CHECK_FAILS(calloc(1, PTRDIFF_MAX_SIZE + 1), ENOMEM);
    CHECK_FAILS(HK(__libc_calloc)(SIZE_MAX, SIZE_MAX), ENOMEM);
}

static void test_realloc(void) {
    static const size_t steps[] = {1, 2, 3, 7, 16, 17, 100, 1000, 1024, 1025, 4096, 65536, 65537,
                                   (size_t)1 << 20, (size_t)2 << 20, ((size_t)2 << 20) + 1,
                                   (size_t)5 << 20, (size_t)9 << 20};
    enum { STEPS = sizeof steps / sizeof steps[0] };

    /* Growing keeps the old contents. */
    unsigned char *p = malloc(steps[0]);
    fill(p, steps[0], 7);
    for (size_t i = 1; i < STEPS; i++) {
        unsigned char *q = realloc(p, steps[i]);
        CHECK(q != NULL);
        if (q == NULL) return;
        CHECK(holds(q, steps[i - 1], 7));
        CHECK(malloc_usable_size(q) >= steps[i]);
        fill(q, steps[i], 7);
        p = q;
    }
    /* Shrinking keeps the prefix. */
    for (size_t i = STEPS - 1; i-- > 0;) {
        unsigned char *q = realloc(p, steps[i]);
        CHECK(q != NULL);
        if (q == NULL) return;
        CHECK(holds(q, steps[i], 7));
        CHECK(malloc_usable_size(q) >= steps[i]);
        p = q;
    }
    free(p);

    /* Growing and shrinking in odd steps through the glibc alias. */
    p = NULL;
    size_t old = 0;
    for (size_t size = 1; size < 300000; size = size * 3 + 1) {
        unsigned char *q = HK(__libc_realloc)(p, size);
        CHECK(q != NULL && holds(q, old < size ? old : size, 9));
        fill(q, size, 9);
        p = q;
        old = size;
    }
    free(p);

    /* realloc(NULL, n) is malloc(n). */
    p = realloc(NULL, 100);
    check_block(p, 100, 16);
    free(p);
    void *z = realloc(NULL, 0);
    CHECK(z != NULL && HK(hakmem_owns)(z));
    free(z);

    /* realloc(p, 0) frees p and returns NULL (glibc), errno untouched. */
    p = malloc(100);
    errno = ERRNO_SENTINEL;
    CHECK(realloc(p, 0) == NULL);
    CHECK(errno == ERRNO_SENTINEL);
    p = malloc((size_t)4 << 20);
    CHECK(realloc(p, 0) == NULL);

    /* Resizing to the usable size is done in place: usable size is exact. */
    p = malloc(100);
    size_t usable = malloc_usable_size(p);
    CHECK(realloc(p, usable) == p);
    free(p);

    /* Success leaves errno alone. */
    p = malloc(10);
    errno = ERRNO_SENTINEL;
    p = realloc(p, 100000);
    CHECK(p != NULL && errno == ERRNO_SENTINEL);
    free(p);

    /* Failure returns NULL with ENOMEM and leaves the block valid. */
    p = malloc(1000);
    fill(p, 1000, 5);
    CHECK_FAILS(realloc(p, SIZE_MAX), ENOMEM);
    CHECK_FAILS(realloc(p, PTRDIFF_MAX_SIZE + 1), ENOMEM);
    CHECK_FAILS(realloc(p, PTRDIFF_MAX_SIZE), ENOMEM);
    CHECK(holds(p, 1000, 5) && malloc_usable_size(p) >= 1000);
    free(p);
}

static void test_reallocarray(void) {
    unsigned char *p = reallocarray(NULL, 10, 10);
    check_block(p, 100, 16);
    fill(p, 100, 11);
    unsigned char *q = reallocarray(p, 1000, 10);
    CHECK(q != NULL && holds(q, 100, 11) && malloc_usable_size(q) >= 10000);
    p = q;
    fill(p, 10000, 12);
    /* Overflow: NULL, ENOMEM, p untouched. */
    CHECK_FAILS(reallocarray(p, SIZE_MAX, 2), ENOMEM);
    CHECK_FAILS(reallocarray(p, (size_t)1 << 33, (size_t)1 << 31), ENOMEM);
    CHECK_FAILS(reallocarray(p, PTRDIFF_MAX_SIZE / 2 + 1, 2), ENOMEM);
    CHECK_FAILS(reallocarray(NULL, SIZE_MAX / 2, 3), ENOMEM);
    CHECK(holds(p, 10000, 12));
    q = reallocarray(p, 50, 2);
    CHECK(q != NULL && holds(q, 100, 12));
    /* A zero product is realloc(p, 0): frees and returns NULL. */
    CHECK(reallocarray(q, 0, 5) == NULL);
    q = reallocarray(NULL, 0, 5);
    CHECK(q != NULL);
    free(q);
}

/* Sizes to try with an alignment: around it, below and above. */
static size_t aligned_sizes(size_t align, size_t out[8]) {
    out[0] = 0;
    out[1] = 1;
    out[2] = align / 2;
    out[3] = align - 1;
    out[4] = align;
    out[5] = align + 1;
    out[6] = 3 * align + 7;
    out[7] = 100000;
    return 8;
}

#define MAX_ALIGN_TESTED ((size_t)4 << 20)

static void test_posix_memalign(void) {
    for (size_t align = sizeof(void *); align <= MAX_ALIGN_TESTED; align *= 2) {
        size_t sizes[8];
        size_t n = aligned_sizes(align, sizes);
        for (size_t i = 0; i < n; i++) {
            void *p = (void *)0x1;
            errno = ERRNO_SENTINEL;
            int rc = posix_memalign(&p, align, sizes[i]);
            CHECK(rc == 0 && errno == ERRNO_SENTINEL);
            check_block(p, sizes[i], align);
            free(p);
        }
    }
    /* Larger alignments (huge mappings) too. */
    void *big = NULL;
    CHECK(posix_memalign(&big, (size_t)64 << 20, 1000) == 0);
    check_block(big, 1000, (size_t)64 << 20);
    free(big);

    /* Not a power of two, or not a multiple of sizeof(void *): EINVAL,
     * *memptr and errno untouched. */
    static const size_t bad[] = {0, 1, 2, 4, 12, 24, 40, 48, 96, 1000, 4097, ((size_t)1 << 20) + 8,
                                 SIZE_MAX, SIZE_MAX / 2 + 9, ((size_t)1 << 63) + 8};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *sentinel = (void *)0x1234;
        void *p = sentinel;
        errno = ERRNO_SENTINEL;
        int rc = posix_memalign(&p, bad[i], 100);
        CHECK(rc == EINVAL);
        CHECK(p == sentinel);
        CHECK(errno == ERRNO_SENTINEL);
    }
    /* No memory: ENOMEM, *memptr untouched. */
    static const size_t huge[][2] = {{64, SIZE_MAX - 100}, {64, PTRDIFF_MAX_SIZE + 1},
                                     {8, SIZE_MAX}, {(size_t)1 << 63, 100},
                                     {(size_t)1 << 62, 100}, {4096, PTRDIFF_MAX_SIZE}};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        void *sentinel = (void *)0x1234;
        void *p = sentinel;
        int rc = posix_memalign(&p, huge[i][0], huge[i][1]);
        CHECK(rc == ENOMEM);
        CHECK(p == sentinel);
    }
}

static void test_aligned_alloc_and_memalign(void) {
    for (size_t align = 1; align <= MAX_ALIGN_TESTED; align *= 2) {
        size_t sizes[8];
        size_t n = aligned_sizes(align, sizes);
        for (size_t i = 0; i < n; i++) {
            errno = ERRNO_SENTINEL;
            void *a = aligned_alloc(align, sizes[i]);
            void *m = memalign(align, sizes[i]);
            void *l = HK(__libc_memalign)(align, sizes[i]);
            CHECK(errno == ERRNO_SENTINEL);
            check_block(a, sizes[i], align);
            check_block(m, sizes[i], align);
            check_block(l, sizes[i], align);
            free(a);
            free(m);
            free(l);
        }
    }
    /* glibc 2.36 rounds a non-power-of-two alignment up (aligned_alloc is an
     * alias of memalign there); 0 and 1 mean malloc's alignment. */
    static const size_t rounded[][2] = {{0, 16}, {3, 16}, {24, 32}, {100, 128},
                                        {3000, 4096}, {5000, 8192}, {((size_t)1 << 20) + 1, (size_t)2 << 20}};
    for (size_t i = 0; i < sizeof rounded / sizeof rounded[0]; i++) {
        void *a = aligned_alloc(rounded[i][0], 100);
        void *m = memalign(rounded[i][0], 100);
        check_block(a, 100, rounded[i][1]);
        check_block(m, 100, rounded[i][1]);
        free(a);
        free(m);
    }
    /* An alignment with no power of two above it: EINVAL. */
    CHECK_FAILS(memalign(SIZE_MAX, 10), EINVAL);
    CHECK_FAILS(memalign(SIZE_MAX / 2 + 2, 10), EINVAL);
    CHECK_FAILS(aligned_alloc(SIZE_MAX, 10), EINVAL);
    CHECK_FAILS(HK(__libc_memalign)(SIZE_MAX, 10), EINVAL);
    /* No memory: ENOMEM. */
    CHECK_FAILS(memalign((size_t)1 << 62, 100), ENOMEM);
    CHECK_FAILS(aligned_alloc((size_t)1 << 63, 100), ENOMEM);
    CHECK_FAILS(memalign(64, SIZE_MAX - 100), ENOMEM);
    CHECK_FAILS(aligned_alloc(64, PTRDIFF_MAX_SIZE + 1), ENOMEM);
}

static void test_valloc_pvalloc(void) {
    static const size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 100000, (size_t)3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i];
        size_t pages = (size + OS_PAGE - 1) / OS_PAGE * OS_PAGE;
        void *v = valloc(size);
        void *lv = HK(__libc_valloc)(size);
        void *pv = pvalloc(size);
        void *lpv = HK(__libc_pvalloc)(size);
        check_block(v, size, OS_PAGE);
        check_block(lv, size, OS_PAGE);
        /* pvalloc rounds the size up to whole pages. */
        check_block(pv, pages, OS_PAGE);
        check_block(lpv, pages, OS_PAGE);
        free(v);
        free(lv);
        free(pv);
        free(lpv);
    }
    CHECK_FAILS(pvalloc(SIZE_MAX - 10), ENOMEM);
    CHECK_FAILS(pvalloc(SIZE_MAX - OS_PAGE + 2), ENOMEM);
    CHECK_FAILS(valloc(SIZE_MAX - 10), ENOMEM);
    CHECK_FAILS(valloc(PTRDIFF_MAX_SIZE + 1), ENOMEM);
    CHECK_FAILS(HK(__libc_pvalloc)(SIZE_MAX), ENOMEM);
}

static void test_usable_size(void) {
    CHECK(malloc_usable_size(NULL) == 0);
    /* The whole usable size can be written without touching a neighbour. */
    static const size_t sizes[] = {1, 17, 100, 1000, 5000, 70000, 300000};
    enum { N = 64 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        void *blocks[N];
        size_t usable[N];
        for (int i = 0; i < N; i++) {
            blocks[i] = malloc(sizes[s]);
            usable[i] = malloc_usable_size(blocks[i]);
            CHECK(usable[i] >= sizes[s]);
            fill(blocks[i], usable[i], (unsigned)i);
        }
        for (int i = 0; i < N; i++) {
            CHECK(holds(blocks[i], usable[i], (unsigned)i));
            free(blocks[i]);
        }
    }
}

static void test_trim_and_stats(void) {
    /* malloc_trim gives free memory back at once and says so (1), like glibc. */
    void *big = malloc((size_t)8 << 20);
    memset(big, 1, (size_t)8 << 20);
    free(big);
    CHECK(malloc_trim(0) == 1);
    int again = malloc_trim((size_t)1 << 20);
    CHECK(again == 0 || again == 1);
    int collected = HK(hakmem_collect)(0);
    CHECK(collected == 0 || collected == 1);

    HK(hakmem_os_counters)(NULL);
    HakmemOsCounters before, after;
    /* Warm up this thread's pages for the sizes below... */
    for (int i = 0; i < 2000; i++) free(malloc(16 + (size_t)(i % 64) * 16));
    HK(hakmem_os_counters)(&before);
    CHECK(before.mmap > 0);
    /* ...then a steady malloc/free loop makes no mmap at all. */
    for (int i = 0; i < 200000; i++) free(malloc(16 + (size_t)(i % 64) * 16));
    HK(hakmem_os_counters)(&after);
    CHECK(after.mmap == before.mmap);
    /* The report goes to stderr; the test checks it. */
    HK(hakmem_stats_print)();

    /* JSON statistics, snprintf-style. */
    size_t needed = HK(hakmem_stats_json)(NULL, 0);
    CHECK(needed > 2);
    char *json = malloc(needed + 1);
    memset(json, 'x', needed + 1);
    CHECK(HK(hakmem_stats_json)(json, needed + 1) == needed);
    CHECK(json[0] == '{' && json[needed - 1] == '}' && json[needed] == '\0');
    CHECK(strstr(json, "\"mmap\":") != NULL && strstr(json, "\"committed_bytes\":") != NULL);
    char small[8];
    memset(small, 'x', sizeof small);
    CHECK(HK(hakmem_stats_json)(small, sizeof small) >= sizeof small);
    CHECK(small[0] == '\0');
    free(json);
}

static void test_sized_free(void) {
    /* free_sized with the size asked for, or any size up to the usable one. */
    static const size_t sizes[] = {0, 1, 100, 1000, 70000, (size_t)3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        HK(free_sized)(p, sizes[i]);
        p = calloc(1, sizes[i]);
        HK(free_sized)(p, sizes[i]);
        p = malloc(sizes[i]);
        HK(free_sized)(p, malloc_usable_size(p));
        for (size_t align = 1; align <= ((size_t)1 << 20); align *= 8) {
            p = aligned_alloc(align, sizes[i]);
            check_block(p, sizes[i], align);
            HK(free_aligned_sized)(p, align, sizes[i]);
        }
    }
    /* Alignments aligned_alloc rounds up are rounded the same way. */
    void *p = aligned_alloc(100, 10);
    HK(free_aligned_sized)(p, 100, 10);
    /* NULL does nothing, errno untouched. */
    errno = ERRNO_SENTINEL;
    HK(free_sized)(NULL, 100);
    HK(free_aligned_sized)(NULL, 64, 100);
    HK(free_aligned_sized)(NULL, SIZE_MAX, 100);
    CHECK(errno == ERRNO_SENTINEL);
    /* The blocks really went back: a steady loop maps nothing new. */
    HakmemOsCounters before, after;
    for (int i = 0; i < 1000; i++) HK(free_sized)(malloc(48), 48);
    HK(hakmem_os_counters)(&before);
    for (int i = 0; i < 100000; i++) HK(free_sized)(malloc(48), 48);
    HK(hakmem_os_counters)(&after);
    CHECK(after.mmap == before.mmap);
}

/* glibc's statistics functions answer about hakmem's heap. */
static void test_mallinfo(void) {
    const size_t big = (size_t)10 << 20;
    char *block = malloc(big);
    memset(block, 1, big);
    struct mallinfo2 info = mallinfo2();
    CHECK(info.uordblks >= big && info.arena >= big && info.hblks >= 1);
    CHECK(info.usmblks == 0 && info.fordblks == 0);
    struct mallinfo legacy = mallinfo();
    CHECK((size_t)legacy.arena >= big && legacy.hblks >= 1);

    char *xml = NULL;
    size_t len = 0;
    FILE *stream = open_memstream(&xml, &len);
    CHECK(stream != NULL);
    errno = ERRNO_SENTINEL;
    CHECK(malloc_info(0, stream) == 0);
    CHECK(malloc_info(1, stream) == EINVAL);
    CHECK(errno == ERRNO_SENTINEL);
    fclose(stream);
    static const char head[] = "<malloc version=\"1\">\n<heap nr=\"0\">\n";
    CHECK(xml != NULL && strncmp(xml, head, sizeof head - 1) == 0);
    CHECK(xml != NULL && strstr(xml, "<hakmem version=\"" HAKMEM_EXPECTED_VERSION "\" format=\"json\">\n{\"") != NULL);
    CHECK(xml != NULL && len > 10 && strcmp(xml + len - 10, "</malloc>\n") == 0);
    free(xml);
    free(block);
    /* After a trim the huge block's mapping is no longer counted. */
    malloc_trim(0);
    struct mallinfo2 trimmed = mallinfo2();
    CHECK(trimmed.uordblks < info.uordblks);
}

/* Local heaps: blocks from hakmem_heap_malloc/calloc/realloc are ordinary
 * blocks (free, realloc, malloc_usable_size take them); delete keeps them
 * valid, destroy gives every page back at once; NULL heaps are ignored. */
static void *heap_thread(void *block) {
    /* Another thread frees a block of a heap that is still alive. */
    free(block);
    return NULL;
}

static void test_local_heaps(void) {
    HakmemHeap *heap = HK(hakmem_heap_new)();
    CHECK(heap != NULL);
    void *blocks[1000];
    for (int i = 0; i < 1000; i++) {
        blocks[i] = HK(hakmem_heap_malloc)(heap, (size_t)(i % 300) * 7);
        CHECK(blocks[i] != NULL && ((uintptr_t)blocks[i] & 15) == 0 && HK(hakmem_owns)(blocks[i]));
        if (blocks[i] != NULL) memset(blocks[i], i & 0xff, (size_t)(i % 300) * 7);
    }
    unsigned char *z = HK(hakmem_heap_calloc)(heap, 1000, 5);
    int zero = z != NULL;
    for (int i = 0; z != NULL && i < 5000; i++) zero &= z[i] == 0;
    CHECK(zero);
    errno = 0;
    CHECK(HK(hakmem_heap_calloc)(heap, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(HK(hakmem_heap_malloc)(heap, SIZE_MAX - 100) == NULL && errno == ENOMEM);
    /* realloc: NULL is malloc, 0 frees, growing keeps the contents (a
     * block of any heap; a huge size too). */
    unsigned char *r = HK(hakmem_heap_realloc)(heap, NULL, 10);
    CHECK(r != NULL);
    memset(r, 0x5a, 10);
    r = HK(hakmem_heap_realloc)(heap, r, 5u << 20);
    CHECK(r != NULL && r[0] == 0x5a && r[9] == 0x5a);
    CHECK(HK(hakmem_heap_realloc)(heap, r, 0) == NULL);
    /* 21: the string and its NUL (the secure build catches one byte less). */
    char *global = malloc(21);
    strcpy(global, "from the thread heap");
    global = HK(hakmem_heap_realloc)(heap, global, 4000);
    CHECK(global != NULL && strcmp(global, "from the thread heap") == 0);
    free(global);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, heap_thread, blocks[0]) == 0);
    pthread_join(t, NULL);
    free(blocks[1]);
    void *shrunk = realloc(blocks[2], 1);
    CHECK(shrunk != NULL);
    free(shrunk);
    /* Delete: the blocks stay valid and are freed by free. */
    HK(hakmem_heap_delete)(heap);
    int kept = 1;
    for (int i = 3; i < 1000; i++) {
        unsigned char *b = blocks[i];
        size_t size = (size_t)(i % 300) * 7;
        for (size_t k = 0; k < size; k += 97) kept &= b[k] == (unsigned char)(i & 0xff);
        free(b);
    }
    CHECK(kept);
    free(z);
    /* Destroy: every page back at once (as many pages in use as before). */
    HK(hakmem_collect)(1);
    char before[2048], after[2048];
    HK(hakmem_stats_json)(before, sizeof before);
    heap = HK(hakmem_heap_new)();
    for (int i = 0; i < 100000; i++) CHECK(HK(hakmem_heap_malloc)(heap, 48) != NULL);
    CHECK(HK(hakmem_heap_malloc)(heap, 3u << 20) != NULL);
    HK(hakmem_heap_destroy)(heap);
    HK(hakmem_collect)(1);
    HK(hakmem_stats_json)(after, sizeof after);
    const char *pages_before = strstr(before, "\"pages_in_use\"");
    const char *pages_after = strstr(after, "\"pages_in_use\"");
    CHECK(pages_before != NULL && pages_after != NULL &&
          atol(strchr(pages_before, ':') + 1) == atol(strchr(pages_after, ':') + 1));
    HK(hakmem_heap_delete)(NULL);
    HK(hakmem_heap_destroy)(NULL);
}

/* Under the kernel's default overcommit heuristic a request for more than
 * memory and swap together is refused: NULL and ENOMEM, as from glibc
 * (hakmem once mapped with MAP_NORESERVE, which skips that check, and
 * handed such blocks out). Other settings refuse nothing of this size
 * (always overcommit) or refuse by another rule (strict accounting). */
static void test_overcommit(void) {
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &mode) != 1) mode = -1;
        fclose(f);
    }
    struct sysinfo info;
    if (mode != 0 || sysinfo(&info) != 0) {
        printf("edge_cases: overcommit checks skipped (vm.overcommit_memory %d)\n", mode);
        return;
    }
    size_t total = ((size_t)info.totalram + (size_t)info.totalswap) * info.mem_unit;
    size_t n = 2 * total + ((size_t)1 << 30);
    CHECK_FAILS(malloc(n), ENOMEM);
    CHECK_FAILS(calloc(1, n), ENOMEM);
    CHECK_FAILS(aligned_alloc(4096, n), ENOMEM);
    CHECK_FAILS(memalign((size_t)64 << 20, n), ENOMEM);
    void *out = &out;
    CHECK(posix_memalign(&out, 4096, n) == ENOMEM && out == &out);
    char *p = malloc(1000);
    CHECK(p != NULL);
    if (p != NULL) {
        fill(p, 1000, 9);
        CHECK_FAILS(realloc(p, n), ENOMEM);
        CHECK(holds(p, 1000, 9));
        free(p);
    }
}

int main(void) {
    test_loaded();
    test_malloc();
    test_free();
    test_calloc();
    test_realloc();
    test_reallocarray();
    test_posix_memalign();
    test_aligned_alloc_and_memalign();
    test_valloc_pvalloc();
    test_usable_size();
    test_trim_and_stats();
    test_sized_free();
    test_mallinfo();
    test_local_heaps();
    test_overcommit();
    printf("edge_cases: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
