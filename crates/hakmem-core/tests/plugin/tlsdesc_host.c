/*
 * Issue 22, hole 7: a thread's first allocation in a dlopen'ed Rust plugin
 * built with hakmem's `dlopen-tls` feature, with floating-point values
 * live across it (tests/dlopen_plugins.rs).
 *
 * The plugin's TLS is placed dynamically (the test runs this with
 * GLIBC_TUNABLES=glibc.rtld.optional_static_tls=0), so the thread's first
 * access to hakmem's slot goes through glibc's _dl_tlsdesc_dynamic, which
 * calls malloc to allocate the module's TLS block. This program's malloc
 * overwrites every vector register first, as any malloc may: glibc before
 * 2.40 does not save them there (its bug 31372), so the TLS access must
 * declare them clobbered.
 *
 * Usage: tlsdesc_host PLUGIN. Prints "same" when the plugin's sum after
 * the allocation equals the sum computed again, else "different A B" (exit 1).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);

static _Atomic long clobbers;

/* Every call of the program's malloc (the dynamic linker's too) leaves
 * all-ones (NaN) in xmm0-xmm15. */
void *malloc(size_t size) {
    __asm__ volatile(
        "pcmpeqd %%xmm0, %%xmm0\n\tpcmpeqd %%xmm1, %%xmm1\n\tpcmpeqd %%xmm2, %%xmm2\n\t"
        "pcmpeqd %%xmm3, %%xmm3\n\tpcmpeqd %%xmm4, %%xmm4\n\tpcmpeqd %%xmm5, %%xmm5\n\t"
        "pcmpeqd %%xmm6, %%xmm6\n\tpcmpeqd %%xmm7, %%xmm7\n\tpcmpeqd %%xmm8, %%xmm8\n\t"
        "pcmpeqd %%xmm9, %%xmm9\n\tpcmpeqd %%xmm10, %%xmm10\n\tpcmpeqd %%xmm11, %%xmm11\n\t"
        "pcmpeqd %%xmm12, %%xmm12\n\tpcmpeqd %%xmm13, %%xmm13\n\tpcmpeqd %%xmm14, %%xmm14\n\t"
        "pcmpeqd %%xmm15, %%xmm15"
        ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
            "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    clobbers++;
    return __libc_malloc(size);
}

typedef double (*floats_fn)(double);
static floats_fn floats;
static double first, again;

static void *first_allocation(void *arg) {
    (void)arg;
    first = floats(3.0);
    again = floats(3.0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (plugin == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    floats = (floats_fn)dlsym(plugin, "plugin_floats_across_alloc");
    if (floats == NULL) return 2;
    pthread_t t;
    long before = clobbers;
    if (pthread_create(&t, NULL, first_allocation, NULL) != 0) return 2;
    pthread_join(t, NULL);
    if (first == again) {
        printf("same (malloc calls %ld)\n", clobbers - before);
        return 0;
    }
    printf("different %g %g\n", first, again);
    return 1;
}
