/*
 * libhakmem.so opened with dlopen (not preloaded), used by threads through
 * dlsym'ed malloc and free, then closed with dlclose while those threads
 * live on; then they exit, which runs hakmem's thread-exit hook (issue 22,
 * hole 3: it jumped into the unmapped library). libhakmem.so is linked
 * with -z nodelete, so dlclose leaves it mapped.
 *
 * Usage: dlclose LIBRARY. Prints "exited 4" and exits 0; any other
 * outcome (a crash) fails the test.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define THREADS 4

static void *(*lib_malloc)(size_t);
static void (*lib_free)(void *);
static pthread_barrier_t allocated, closed;
static _Atomic int wrong;

static void *allocate_then_wait(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++) {
        char *p = lib_malloc(16 + (size_t)i * 100);
        if (p == NULL) {
            wrong = 1;
            break;
        }
        memset(p, i, 16);
        lib_free(p);
    }
    pthread_barrier_wait(&allocated);
    pthread_barrier_wait(&closed);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    lib_malloc = (void *(*)(size_t))dlsym(lib, "malloc");
    lib_free = (void (*)(void *))dlsym(lib, "free");
    if (lib_malloc == NULL || lib_free == NULL) return 1;
    pthread_barrier_init(&allocated, NULL, THREADS + 1);
    pthread_barrier_init(&closed, NULL, THREADS + 1);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, allocate_then_wait, NULL) != 0) return 2;
    pthread_barrier_wait(&allocated);
    if (dlclose(lib) != 0) {
        fprintf(stderr, "dlclose: %s\n", dlerror());
        return 1;
    }
    pthread_barrier_wait(&closed);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    if (wrong) return 3;
    printf("exited %d\n", THREADS);
    return 0;
}
