/*
 * Control: blocks of 16 B to 32 KiB written by one thread and freed by
 * another, while the first keeps allocating the same sizes (reusing what
 * the other freed, written end to end).
 *
 * Every allocator must pass; failing counts as broken.
 */
// expect: ok
#include "misuse.h"
#include <pthread.h>

#define RING 256
#define TOTAL 20000

static void *ring[RING];
static size_t ring_size[RING];
static int head, tail;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int bad;

static void *consumer(void *arg) {
    (void)arg;
    for (int n = 0; n < TOTAL; n++) {
        pthread_mutex_lock(&lock);
        while (head == tail) {
            pthread_cond_wait(&cond, &lock);
        }
        unsigned char *p = ring[tail % RING];
        size_t size = ring_size[tail % RING];
        tail++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        if (p[0] != (unsigned char)size || p[size - 1] != (unsigned char)size) {
            bad = 1;
        }
        free(p);
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, consumer, NULL) != 0) {
        return EXIT_SETUP;
    }
    uint64_t x = 88172645463325252ULL;
    for (int n = 0; n < TOTAL; n++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t size = 16 + x % (32 << 10);
        unsigned char *p = must_malloc(size);
        memset(p, (unsigned char)size, size);
        pthread_mutex_lock(&lock);
        while (head - tail == RING) {
            pthread_cond_wait(&cond, &lock);
        }
        ring[head % RING] = p;
        ring_size[head % RING] = size;
        head++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
    }
    pthread_join(t, NULL);
    return bad ? EXIT_OLD_DATA : reached_end();
}
