/*
 * local_heap_producer.c: a thread that allocates only through heaps it
 * makes and deletes (hakmem's hakmem_heap_*, mimalloc's mi_heap_*), and
 * two threads that free every block it hands them through a 4096-slot
 * ring: at most 4096 blocks of 16 B to 16 KiB (about 32 MiB) are live.
 * Each round makes a heap, allocates PER blocks from it into the ring and
 * deletes the heap; the blocks stay valid and the consumers free them.
 *
 * The heap API is looked up in the LD_PRELOADed library at run time;
 * without one (glibc, jemalloc, tcmalloc) the producer uses malloc.
 *
 * Usage: local_heap_producer [ROUNDS [PER]]   (default 2000 2000)
 * Prints the API used, the wall time (ms) and the peak RSS (MiB).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define RING 4096

static void *_Atomic ring[RING];
static atomic_int done;

static void *(*heap_new)(void);
static void *(*heap_malloc)(void *, size_t);
static void (*heap_delete)(void *);

static void *consumer(void *arg) {
    long first = (long)arg;
    for (;;) {
        int found = 0;
        for (long k = first; k < RING; k += 2) {
            void *p = atomic_exchange(&ring[k], NULL);
            if (p) {
                free(p);
                found = 1;
            }
        }
        if (!found) {
            if (atomic_load(&done))
                return NULL;
            sched_yield();
        }
    }
}

static int find_api(const char *new_name, const char *malloc_name, const char *delete_name) {
    heap_new = (void *(*)(void))dlsym(RTLD_DEFAULT, new_name);
    heap_malloc = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, malloc_name);
    heap_delete = (void (*)(void *))dlsym(RTLD_DEFAULT, delete_name);
    return heap_new && heap_malloc && heap_delete;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 2000;
    long per = argc > 2 ? atol(argv[2]) : 2000;
    const char *api = "hakmem_heap";
    if (!find_api("hakmem_heap_new", "hakmem_heap_malloc", "hakmem_heap_delete")) {
        api = "mi_heap";
        if (!find_api("mi_heap_new", "mi_heap_malloc", "mi_heap_delete"))
            api = "malloc";
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t consumers[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&consumers[i], NULL, consumer, (void *)i);
    unsigned long s = 1;
    for (long r = 0; r < rounds; r++) {
        void *heap = heap_new ? heap_new() : NULL;
        if (heap_new && !heap) {
            perror("heap_new");
            return 3;
        }
        for (long j = 0; j < per; j++) {
            s = s * 6364136223846793005UL + 1442695040888963407UL;
            size_t size = 16 + (s >> 33) % 16368;
            char *p = heap ? heap_malloc(heap, size) : malloc(size);
            if (!p) {
                perror("malloc");
                return 3;
            }
            memset(p, 1, 16);
            long k = (long)((s >> 20) % RING);
            while (atomic_load(&ring[k]) != NULL)
                k = (k + 1) % RING;
            atomic_store(&ring[k], p);
        }
        if (heap)
            heap_delete(heap);
    }
    atomic_store(&done, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(consumers[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    printf("%s %ld ms %ld MiB\n", api, ms, ru.ru_maxrss / 1024);
    return 0;
}
