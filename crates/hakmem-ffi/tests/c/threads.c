/*
 * Cross-thread frees through a mutex-protected queue.
 *
 * Phase 1: PRODUCERS threads allocate blocks of mixed sizes (small, medium,
 * large and the odd huge one), stamp them, and push them on a bounded
 * queue; CONSUMERS threads pop them, check the stamp, sometimes realloc
 * them (a cross-thread realloc), and free them. Producers finish and exit
 * while consumers are still freeing their blocks; each producer also
 * leaves a stash of live blocks behind for main to check and free after
 * the producer has exited.
 *
 * Phase 2: many short-lived threads each allocate, free half of their
 * blocks, and hand the other half to main, which frees them after the
 * threads are gone.
 *
 * Output is deterministic (counts only), so it can be compared with a run
 * on the system allocator. Exits non-zero on any corrupted block.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    PRODUCERS = 4,
    CONSUMERS = 3,
    PER_PRODUCER = 150000,
    STASH = 500,
    QUEUE_CAP = 1024,
    SHORT_THREADS = 64,
    SHORT_BLOCKS = 400,
};

struct stamp {
    uint32_t producer;
    uint32_t seq;
    size_t size;
};

static unsigned char pattern(uint32_t producer, uint32_t seq, size_t i) {
    return (unsigned char)(producer * 131u + seq * 7u + i);
}

/* Writes the stamp and a pattern at the start, middle and end of the rest
 * of the block (size > sizeof(struct stamp)). */
static void stamp_block(unsigned char *p, uint32_t producer, uint32_t seq, size_t size) {
    struct stamp s = {producer, seq, size};
    memcpy(p, &s, sizeof s);
    size_t spots[] = {sizeof s, sizeof s + (size - sizeof s) / 2, size - 1};
    for (int k = 0; k < 3; k++) p[spots[k]] = pattern(producer, seq, spots[k]);
}

static int block_ok(const unsigned char *p) {
    struct stamp s;
    memcpy(&s, p, sizeof s);
    size_t spots[] = {sizeof s, sizeof s + (s.size - sizeof s) / 2, s.size - 1};
    for (int k = 0; k < 3; k++) {
        if (p[spots[k]] != pattern(s.producer, s.seq, spots[k])) return 0;
    }
    return 1;
}

static size_t block_size(uint32_t *rng, uint32_t seq) {
    *rng = *rng * 1664525u + 1013904223u;
    uint32_t r = *rng >> 8;
    size_t size;
    if (seq % 4096 == 4095) {
        size = ((size_t)2 << 20) + r % (1 << 20); /* huge */
    } else if (seq % 256 == 255) {
        size = 65536 + r % 400000; /* large */
    } else if (seq % 16 == 15) {
        size = 1024 + r % 64000; /* medium */
    } else {
        size = 1 + r % 1024; /* small */
    }
    return size < sizeof(struct stamp) + 1 ? sizeof(struct stamp) + 1 : size;
}

static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    void *items[QUEUE_CAP];
    size_t head, count;
    int producers_left;
} queue = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0,
           PRODUCERS};

static void *stashes[PRODUCERS][STASH];
static long consumed[CONSUMERS];
static long bad[CONSUMERS];

static void push(void *p) {
    pthread_mutex_lock(&queue.lock);
    while (queue.count == QUEUE_CAP) pthread_cond_wait(&queue.not_full, &queue.lock);
    queue.items[(queue.head + queue.count) % QUEUE_CAP] = p;
    queue.count++;
    pthread_cond_signal(&queue.not_empty);
    pthread_mutex_unlock(&queue.lock);
}

/* NULL when the queue is empty and every producer is done. */
static void *pop(void) {
    pthread_mutex_lock(&queue.lock);
    while (queue.count == 0 && queue.producers_left > 0) pthread_cond_wait(&queue.not_empty, &queue.lock);
    void *p = NULL;
    if (queue.count > 0) {
        p = queue.items[queue.head];
        queue.head = (queue.head + 1) % QUEUE_CAP;
        queue.count--;
        pthread_cond_signal(&queue.not_full);
    }
    pthread_mutex_unlock(&queue.lock);
    return p;
}

static void *producer(void *arg) {
    uint32_t id = (uint32_t)(uintptr_t)arg;
    uint32_t rng = id * 2654435761u + 1;
    for (uint32_t seq = 0; seq < PER_PRODUCER; seq++) {
        size_t size = block_size(&rng, seq);
        unsigned char *p = malloc(size);
        if (p == NULL) {
            fprintf(stderr, "producer %u: malloc(%zu) failed\n", id, size);
            exit(1);
        }
        stamp_block(p, id, seq, size);
        push(p);
    }
    for (uint32_t k = 0; k < STASH; k++) {
        size_t size = 32 + k;
        unsigned char *p = malloc(size);
        stamp_block(p, id, PER_PRODUCER + k, size);
        stashes[id][k] = p;
    }
    pthread_mutex_lock(&queue.lock);
    queue.producers_left--;
    pthread_cond_broadcast(&queue.not_empty);
    pthread_mutex_unlock(&queue.lock);
    return NULL;
}

static void *consumer(void *arg) {
    int id = (int)(uintptr_t)arg;
    unsigned char *p;
    while ((p = pop()) != NULL) {
        if (!block_ok(p)) bad[id]++;
        struct stamp s;
        memcpy(&s, p, sizeof s);
        if (s.seq % 7 == 0) {
            /* Resize another thread's block, then check the stamp moved along. */
            size_t new_size = s.seq % 14 == 0 ? s.size * 2 : sizeof s + 1 + s.size / 3;
            unsigned char *q = realloc(p, new_size);
            if (q == NULL || memcmp(q, &s, sizeof s) != 0) {
                bad[id]++;
            } else {
                p = q;
            }
        }
        free(p);
        consumed[id]++;
    }
    return NULL;
}

struct short_result {
    void *kept[SHORT_BLOCKS / 2];
};

static void *short_lived(void *arg) {
    struct short_result *out = arg;
    void *blocks[SHORT_BLOCKS];
    for (int i = 0; i < SHORT_BLOCKS; i++) {
        size_t size = 16 + (size_t)(i * 37 % 3000);
        blocks[i] = malloc(size);
        memset(blocks[i], i & 0xff, size);
    }
    for (int i = 0; i < SHORT_BLOCKS; i++) {
        if (i % 2 == 0) {
            free(blocks[i]);
        } else {
            out->kept[i / 2] = blocks[i];
        }
    }
    return NULL;
}

int main(void) {
    pthread_t producers[PRODUCERS], consumers[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++) pthread_create(&consumers[i], NULL, consumer, (void *)(uintptr_t)i);
    for (int i = 0; i < PRODUCERS; i++) pthread_create(&producers[i], NULL, producer, (void *)(uintptr_t)i);
    for (int i = 0; i < PRODUCERS; i++) pthread_join(producers[i], NULL);
    for (int i = 0; i < CONSUMERS; i++) pthread_join(consumers[i], NULL);

    long total = 0, corrupted = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        total += consumed[i];
        corrupted += bad[i];
    }
    /* The producers are gone; their stashed blocks are still intact. */
    long stash_ok = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        for (int k = 0; k < STASH; k++) {
            stash_ok += block_ok(stashes[i][k]);
            free(stashes[i][k]);
        }
    }
    printf("phase 1: produced %d consumed %ld corrupted %ld stash intact %ld/%d\n", PRODUCERS * PER_PRODUCER,
           total, corrupted, stash_ok, PRODUCERS * STASH);

    static struct short_result results[SHORT_THREADS];
    long kept_ok = 0;
    for (int round = 0; round < 4; round++) {
        pthread_t threads[SHORT_THREADS / 4];
        for (int i = 0; i < SHORT_THREADS / 4; i++) {
            pthread_create(&threads[i], NULL, short_lived, &results[round * (SHORT_THREADS / 4) + i]);
        }
        for (int i = 0; i < SHORT_THREADS / 4; i++) pthread_join(threads[i], NULL);
    }
    for (int t = 0; t < SHORT_THREADS; t++) {
        for (int k = 0; k < SHORT_BLOCKS / 2; k++) {
            const unsigned char *p = results[t].kept[k];
            int i = 2 * k + 1;
            kept_ok += p[0] == (i & 0xff) && p[15] == (i & 0xff);
            free(results[t].kept[k]);
        }
    }
    printf("phase 2: threads %d blocks outliving their thread intact %ld/%d\n", SHORT_THREADS, kept_ok,
           SHORT_THREADS * SHORT_BLOCKS / 2);

    int ok = total == (long)PRODUCERS * PER_PRODUCER && corrupted == 0 && stash_ok == PRODUCERS * STASH &&
             kept_ok == SHORT_THREADS * SHORT_BLOCKS / 2;
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
