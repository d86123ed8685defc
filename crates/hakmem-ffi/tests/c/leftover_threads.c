/* Threads that come one after another, each leaving about half of the
 * blocks it allocated (100 blocks of 16 B to 5 KiB) behind for good; the
 * main thread frees one of them. Each also resizes a block another one
 * left (up to 50 KB; 200 such blocks live) and allocates and frees a
 * 3 MiB block. Prints the bytes left and the time taken (ms); the test
 * reads hakmem's statistics at exit (HAKMEM_STATS=1). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 5000
#define BLOCKS 100
#define KEPT 200

static void *kept[KEPT];

static size_t size_of_block(int j) { return 16 + (size_t)(j * 97) % 5000; }

static void *worker(void *arg) {
    long i = (long)arg;
    void *blocks[BLOCKS];
    for (int j = 0; j < BLOCKS; j++) {
        blocks[j] = malloc(size_of_block(j));
        if (!blocks[j]) {
            perror("malloc");
            exit(2);
        }
        memset(blocks[j], 1, 16);
    }
    void *resized = realloc(kept[i % KEPT], 100 + (size_t)(i % 50) * 1000);
    if (!resized) {
        perror("realloc");
        exit(2);
    }
    kept[i % KEPT] = resized;
    char *big = malloc(3 << 20);
    if (!big) {
        perror("malloc");
        exit(2);
    }
    memset(big, 1, 4096);
    free(big);
    for (int j = 0; j < BLOCKS; j += 2)
        free(blocks[j]);
    return blocks[1];
}

int main(void) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int t = 0; t < THREADS; t++) {
        pthread_t th;
        void *one;
        if (pthread_create(&th, NULL, worker, (void *)(long)t) != 0 || pthread_join(th, &one) != 0) {
            fprintf(stderr, "thread %d failed\n", t);
            return 2;
        }
        free(one);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    size_t left = 0;
    for (int j = 3; j < BLOCKS; j += 2)
        left += size_of_block(j);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    printf("left %zu ms %ld\n", left * THREADS, ms);
    return 0;
}
