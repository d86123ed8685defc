/*
 * bench.c: hakmem-bench's workloads as a C program, for `hakmem-bench
 * --preload`, which compiles it (cc -O2) and runs it once per allocator with
 * that allocator's malloc LD_PRELOADed (or none, for glibc).
 *
 * This is the C twin of src/workloads.rs and must stay in step with it: the
 * same SplitMix64 generator and draws in the same order (so a seed gives
 * every allocator, and both languages, the same request stream), the same
 * kernels, the same block stamping and checking, the same operation counts,
 * and the result line of src/runner.rs on stdout.
 *
 * Usage: bench KERNEL MIN MAX WS ITERS SEED THREADS WORKLOAD ALLOCATOR
 *   KERNEL is mixed, fixed, mt-mixed, larson, prodcons, realloc, huge, churn,
 *   pacing or rethread; prodcons and pacing run THREADS / 2
 *   producer/consumer pairs, churn and rethread THREADS threads per round;
 *   WORKLOAD and ALLOCATOR only label the result line.
 * Exit status: 0 done, 2 bad arguments, 3 malloc returned NULL,
 *   4 LD_PRELOAD names a library that is not loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define EXIT_USAGE 2
#define EXIT_OUT_OF_MEMORY 3
#define EXIT_NOT_PRELOADED 4

/* The constants of src/workloads.rs. */
#define MAX_BLOCK_SIZE ((size_t)1 << 30)
#define HANDOFF_EVERY 128
#define HANDOFF_BATCH 16
#define MAILBOX_CAP 4096
#define PRODCONS_BATCH 64
#define PRODCONS_DEPTH 64
#define CHURN_MIN_SIZE 24
#define RETHREAD_EXCHANGES 256
#define SPINS_BEFORE_YIELD 64

/* Tells the compiler that p escapes and memory may be read, so neither the
 * allocation nor the stamping stores can be optimised away. */
#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

/* ---- SplitMix64 (src/rng.rs) ---- */

typedef struct {
    uint64_t state;
} rng_t;

static inline uint64_t rng_next(rng_t *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline size_t rng_below(rng_t *r, size_t bound) {
    return (size_t)(((unsigned __int128)rng_next(r) * bound) >> 64);
}

static inline size_t rng_in_range(rng_t *r, size_t min, size_t max) {
    return min + rng_below(r, max - min + 1);
}

static rng_t rng_for_thread(uint64_t seed, size_t index) {
    rng_t seeder = {seed};
    uint64_t thread_seed = rng_next(&seeder);
    for (size_t i = 0; i < index; i++) thread_seed = rng_next(&seeder);
    return (rng_t){thread_seed};
}

/* ---- blocks ---- */

/* A live block and its requested size; ptr == NULL is an empty slot. */
typedef struct {
    unsigned char *ptr;
    size_t size;
} block_t;

static inline unsigned char tag_of(block_t b) {
    return (unsigned char)(((uintptr_t)b.ptr >> 4) ^ b.size);
}

__attribute__((noinline, cold, noreturn)) static void out_of_memory(size_t size) {
    fprintf(stderr, "bench: allocating %zu bytes returned NULL\n", size);
    exit(EXIT_OUT_OF_MEMORY);
}

static inline void block_stamp(block_t b) {
    unsigned char tag = tag_of(b);
    b.ptr[0] = tag;
    b.ptr[b.size - 1] = tag;
}

static inline block_t block_alloc(size_t size) {
    unsigned char *p = malloc(size);
    ESCAPE(p);
    if (p == NULL) out_of_memory(size);
    block_t b = {p, size};
    block_stamp(b);
    return b;
}

static inline int block_intact(block_t b) {
    unsigned char tag = tag_of(b);
    return b.ptr[0] == tag && b.ptr[b.size - 1] == tag;
}

static inline void block_free(block_t b) {
    ESCAPE(b.ptr);
    free(b.ptr);
}

/* huge: allocates, writes every byte (zero, as C++ value-initialisation of
 * new char[n]() does) and stamps. */
static block_t block_alloc_written(size_t size) {
    unsigned char *p = malloc(size);
    ESCAPE(p);
    if (p == NULL) out_of_memory(size);
    memset(p, 0, size);
    ESCAPE(p);
    block_t b = {p, size};
    block_stamp(b);
    return b;
}

/* churn: a block carries its size and a check word (size XOR address) in
 * its first 16 bytes and its tag in its last byte (Block::calloc_sized). */
static inline uint64_t churn_check(block_t b) {
    return (uint64_t)b.size ^ (uint64_t)(uintptr_t)b.ptr;
}

static block_t block_calloc_sized(size_t size, int *zeroed) {
    unsigned char *p = calloc(1, size);
    ESCAPE(p);
    if (p == NULL) out_of_memory(size);
    int z = 1;
    for (size_t i = 0; i < size; i++) z &= p[i] == 0;
    block_t b = {p, size};
    uint64_t header[2] = {(uint64_t)size, churn_check(b)};
    memcpy(p, header, sizeof header);
    p[size - 1] = tag_of(b);
    *zeroed = z;
    return b;
}

/* rethread: the header and tag of block_calloc_sized on a block that is not
 * zeroed (Block::alloc_sized). */
static block_t block_alloc_sized(size_t size) {
    unsigned char *p = malloc(size);
    ESCAPE(p);
    if (p == NULL) out_of_memory(size);
    block_t b = {p, size};
    uint64_t header[2] = {(uint64_t)size, churn_check(b)};
    memcpy(p, header, sizeof header);
    p[size - 1] = tag_of(b);
    return b;
}

/* The block at p with the size its header gives; 0 if the header or the tag
 * was damaged (the block is then leaked). */
static int block_from_sized(unsigned char *p, size_t min, size_t max, block_t *out) {
    uint64_t header[2];
    memcpy(header, p, sizeof header);
    if (header[0] < min || header[0] > max) return 0;
    block_t b = {p, (size_t)header[0]};
    if (header[1] != churn_check(b) || p[b.size - 1] != tag_of(b)) return 0;
    *out = b;
    return 1;
}

/* A size in [min, max] whose binary exponent is uniform (workloads.rs:
 * log_size). */
static size_t log_size(rng_t *r, size_t min, size_t max) {
    size_t low = 63 - (size_t)__builtin_clzll(min), high = 63 - (size_t)__builtin_clzll(max);
    size_t exponent = rng_in_range(r, low, high);
    size_t from = (size_t)1 << exponent, to = ((size_t)1 << exponent) * 2 - 1;
    return rng_in_range(r, from < min ? min : from, to > max ? max : to);
}

/* ---- runs ---- */

typedef struct {
    const char *kernel;
    size_t min, max, ws;
    uint64_t iters, seed;
    size_t threads;
} params_t;

typedef struct {
    uint64_t start_ns, end_ns, ops, errors;
} thread_run_t;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One allocation and free before timing (see warm_up in workloads.rs). */
static void warm_up(size_t size) {
    block_free(block_alloc(size));
}

static block_t *slots_new(size_t ws) {
    block_t *slots = calloc(ws, sizeof *slots);
    if (slots == NULL) out_of_memory(ws * sizeof *slots);
    return slots;
}

/* Frees what is left in the slots (untimed); returns the damaged count. */
static uint64_t slots_drain(block_t *slots, size_t ws) {
    uint64_t errors = 0;
    for (size_t i = 0; i < ws; i++) {
        if (slots[i].ptr != NULL) {
            errors += !block_intact(slots[i]);
            block_free(slots[i]);
        }
    }
    free(slots);
    return errors;
}

static inline void mixed_step(const params_t *p, rng_t *rng, block_t *slot, uint64_t *errors) {
    if (slot->ptr != NULL) {
        *errors += !block_intact(*slot);
        block_free(*slot);
        slot->ptr = NULL;
    } else {
        *slot = block_alloc(rng_in_range(rng, p->min, p->max));
    }
}

static thread_run_t run_mixed(const params_t *p, rng_t rng, pthread_barrier_t *barrier) {
    block_t *slots = slots_new(p->ws);
    warm_up(p->min);
    if (barrier != NULL) pthread_barrier_wait(barrier);
    thread_run_t run = {0};
    run.start_ns = now_ns();
    for (uint64_t i = 0; i < p->iters; i++) {
        block_t *slot = &slots[rng_below(&rng, p->ws)];
        mixed_step(p, &rng, slot, &run.errors);
    }
    run.end_ns = now_ns();
    run.ops = p->iters;
    run.errors += slots_drain(slots, p->ws);
    return run;
}

static thread_run_t run_fixed(const params_t *p) {
    rng_t rng = {p->seed};
    warm_up(p->min);
    thread_run_t run = {0};
    run.start_ns = now_ns();
    for (uint64_t i = 0; i < p->iters; i++) {
        block_t b = block_alloc(rng_in_range(&rng, p->min, p->max));
        run.errors += !block_intact(b);
        block_free(b);
    }
    run.end_ns = now_ns();
    run.ops = 2 * p->iters;
    return run;
}

static thread_run_t run_realloc(const params_t *p) {
    rng_t rng = {p->seed};
    block_t *slots = slots_new(p->ws);
    warm_up(p->min);
    thread_run_t run = {0};
    run.start_ns = now_ns();
    for (uint64_t i = 0; i < p->iters; i++) {
        block_t *slot = &slots[rng_below(&rng, p->ws)];
        if (slot->ptr != NULL && rng_below(&rng, 4) != 0) {
            run.errors += !block_intact(*slot);
            size_t size = rng_in_range(&rng, p->min, p->max);
            unsigned char old_tag = tag_of(*slot);
            unsigned char *q = realloc(slot->ptr, size);
            ESCAPE(q);
            if (q == NULL) out_of_memory(size);
            run.errors += q[0] != old_tag;
            *slot = (block_t){q, size};
            block_stamp(*slot);
        } else {
            mixed_step(p, &rng, slot, &run.errors);
        }
    }
    run.end_ns = now_ns();
    run.ops = p->iters;
    run.errors += slots_drain(slots, p->ws);
    return run;
}

/* ---- mt-mixed ---- */

typedef struct {
    const params_t *p;
    size_t index;
    pthread_barrier_t *barrier;
    thread_run_t run;
} mixed_arg_t;

static void *mixed_thread(void *arg) {
    mixed_arg_t *a = arg;
    a->run = run_mixed(a->p, rng_for_thread(a->p->seed, a->index), a->barrier);
    return NULL;
}

/* ---- larson ---- */

/* Blocks handed to one thread for it to free. */
typedef struct {
    pthread_mutex_t lock;
    block_t *items;
    size_t len, cap;
} mailbox_t;

typedef struct {
    const params_t *p;
    size_t index;
    mailbox_t *mailboxes;
    atomic_size_t *finished;
    pthread_barrier_t *barrier;
    thread_run_t run;
} larson_arg_t;

/* Appends unless m already holds MAILBOX_CAP blocks; returns whether it did. */
static int mailbox_append(mailbox_t *m, const block_t *items, size_t n) {
    pthread_mutex_lock(&m->lock);
    if (m->len >= MAILBOX_CAP) {
        pthread_mutex_unlock(&m->lock);
        return 0;
    }
    if (m->len + n > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        while (cap < m->len + n) cap *= 2;
        block_t *grown = realloc(m->items, cap * sizeof *grown);
        if (grown == NULL) out_of_memory(cap * sizeof *grown);
        m->items = grown;
        m->cap = cap;
    }
    memcpy(m->items + m->len, items, n * sizeof *items);
    m->len += n;
    pthread_mutex_unlock(&m->lock);
    return 1;
}

/* Frees every block in m (swapped into *incoming so that the lock is held
 * only for the swap); returns how many. */
static uint64_t free_mail(mailbox_t *m, mailbox_t *incoming, uint64_t *errors) {
    pthread_mutex_lock(&m->lock);
    block_t *items = m->items;
    size_t len = m->len, cap = m->cap;
    m->items = incoming->items;
    m->len = 0;
    m->cap = incoming->cap;
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < len; i++) {
        *errors += !block_intact(items[i]);
        block_free(items[i]);
    }
    incoming->items = items;
    incoming->cap = cap;
    return len;
}

static void *larson_thread(void *arg) {
    larson_arg_t *a = arg;
    const params_t *p = a->p;
    mailbox_t *own = &a->mailboxes[a->index];
    mailbox_t *next = &a->mailboxes[(a->index + 1) % p->threads];
    rng_t rng = rng_for_thread(p->seed, a->index);
    block_t *slots = slots_new(p->ws);
    block_t outgoing[HANDOFF_BATCH];
    mailbox_t incoming = {.items = NULL, .len = 0, .cap = 0};
    uint64_t ops = 0, errors = 0;
    warm_up(p->min);
    pthread_barrier_wait(a->barrier);
    uint64_t start = now_ns();
    for (uint64_t i = 0; i < p->iters; i++) {
        block_t *slot = &slots[rng_below(&rng, p->ws)];
        mixed_step(p, &rng, slot, &errors);
        ops++;
        if (i % HANDOFF_EVERY == HANDOFF_EVERY - 1) {
            size_t from = rng_below(&rng, p->ws), n = 0;
            for (size_t k = 0; k < p->ws && n < HANDOFF_BATCH; k++) {
                block_t *s = &slots[(from + k) % p->ws];
                if (s->ptr != NULL) {
                    outgoing[n++] = *s;
                    s->ptr = NULL;
                }
            }
            /* A full neighbour: free our own mail while we wait, so that a
             * ring of waiting threads still makes progress. */
            while (!mailbox_append(next, outgoing, n)) {
                ops += free_mail(own, &incoming, &errors);
                sched_yield();
            }
            ops += free_mail(own, &incoming, &errors);
        }
    }
    /* Keep freeing what the others send until all have stopped sending.
     * Release pairs with the Acquire load of the other threads. */
    atomic_fetch_add_explicit(a->finished, 1, memory_order_release);
    for (;;) {
        int all_finished = atomic_load_explicit(a->finished, memory_order_acquire) == p->threads;
        ops += free_mail(own, &incoming, &errors);
        if (all_finished) break;
        sched_yield();
    }
    uint64_t end = now_ns();
    errors += slots_drain(slots, p->ws);
    free(incoming.items);
    a->run = (thread_run_t){start, end, ops, errors};
    return NULL;
}

/* ---- prodcons ---- */

typedef struct {
    size_t len;
    block_t blocks[PRODCONS_BATCH];
} batch_t;

/* One pair's bounded queue of batches (allocated before timing). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t not_full, not_empty;
    batch_t ring[PRODCONS_DEPTH];
    size_t head, count;
    int done;
} queue_t;

typedef struct {
    const params_t *p;
    size_t index;
    queue_t *queue;
    pthread_barrier_t *barrier;
    thread_run_t run;
} prodcons_arg_t;

static void queue_push(queue_t *q, const batch_t *batch) {
    pthread_mutex_lock(&q->lock);
    while (q->count == PRODCONS_DEPTH) pthread_cond_wait(&q->not_full, &q->lock);
    q->ring[(q->head + q->count) % PRODCONS_DEPTH] = *batch;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

static void *producer(void *arg) {
    prodcons_arg_t *a = arg;
    const params_t *p = a->p;
    queue_t *q = a->queue;
    rng_t rng = rng_for_thread(p->seed, a->index);
    batch_t batch = {.len = 0};
    warm_up(p->min);
    pthread_barrier_wait(a->barrier);
    uint64_t start = now_ns();
    for (uint64_t i = 0; i < p->iters; i++) {
        batch.blocks[batch.len++] = block_alloc(rng_in_range(&rng, p->min, p->max));
        if (batch.len == PRODCONS_BATCH) {
            queue_push(q, &batch);
            batch.len = 0;
        }
    }
    if (batch.len > 0) queue_push(q, &batch);
    pthread_mutex_lock(&q->lock);
    q->done = 1;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
    a->run = (thread_run_t){start, now_ns(), p->iters, 0};
    return NULL;
}

static void *consumer(void *arg) {
    prodcons_arg_t *a = arg;
    queue_t *q = a->queue;
    batch_t batch;
    uint64_t ops = 0, errors = 0;
    warm_up(a->p->min);
    pthread_barrier_wait(a->barrier);
    uint64_t start = now_ns();
    for (;;) {
        pthread_mutex_lock(&q->lock);
        while (q->count == 0 && !q->done) pthread_cond_wait(&q->not_empty, &q->lock);
        if (q->count == 0) {
            pthread_mutex_unlock(&q->lock);
            break;
        }
        batch = q->ring[q->head];
        q->head = (q->head + 1) % PRODCONS_DEPTH;
        q->count--;
        pthread_cond_signal(&q->not_full);
        pthread_mutex_unlock(&q->lock);
        ops += batch.len;
        for (size_t i = 0; i < batch.len; i++) {
            errors += !block_intact(batch.blocks[i]);
            block_free(batch.blocks[i]);
        }
    }
    a->run = (thread_run_t){start, now_ns(), ops, errors};
    return NULL;
}

/* ---- huge ---- */

static thread_run_t run_huge(const params_t *p) {
    rng_t rng = {p->seed};
    block_t *live = slots_new(p->ws);
    /* Untimed: fill the live set (which also warms the allocator up). */
    for (size_t i = 0; i < p->ws; i++) live[i] = block_alloc_written(rng_in_range(&rng, p->min, p->max));
    thread_run_t run = {0};
    run.start_ns = now_ns();
    for (uint64_t i = 0; i < p->iters; i++) {
        block_t *slot = &live[rng_below(&rng, p->ws)];
        run.errors += !block_intact(*slot);
        block_free(*slot);
        *slot = block_alloc_written(rng_in_range(&rng, p->min, p->max));
    }
    run.end_ns = now_ns();
    run.ops = 2 * p->iters;
    run.errors += slots_drain(live, p->ws);
    return run;
}

/* ---- churn ---- */

typedef struct {
    const params_t *p;
    _Atomic(unsigned char *) *slot;
    size_t size;
    atomic_uint_fast64_t *errors;
} churn_arg_t;

static void *churn_thread(void *arg) {
    churn_arg_t *a = arg;
    int zeroed;
    block_t b = block_calloc_sized(a->size, &zeroed);
    uint64_t damaged = !zeroed;
    /* acq_rel: release publishes this block's header and tag to the thread
     * that swaps it out; acquire pairs with the release of the thread that
     * swapped the old block in. */
    unsigned char *old = atomic_exchange_explicit(a->slot, b.ptr, memory_order_acq_rel);
    if (old != NULL) {
        block_t ob;
        if (block_from_sized(old, a->p->min, a->p->max, &ob))
            block_free(ob);
        else
            damaged++;
    }
    /* Read by the main thread after the join, which orders it. */
    if (damaged) atomic_fetch_add_explicit(a->errors, damaged, memory_order_relaxed);
    return NULL;
}

/* ---- rethread ---- */

typedef struct {
    const params_t *p;
    _Atomic(unsigned char *) *slots;
    uint64_t seed;
    atomic_uint_fast64_t *errors;
} rethread_arg_t;

static void *rethread_thread(void *arg) {
    rethread_arg_t *a = arg;
    rng_t rng = {a->seed};
    uint64_t damaged = 0;
    for (int i = 0; i < RETHREAD_EXCHANGES; i++) {
        size_t size = log_size(&rng, a->p->min, a->p->max);
        _Atomic(unsigned char *) *slot = &a->slots[rng_below(&rng, a->p->ws)];
        block_t b = block_alloc_sized(size);
        /* acq_rel as in churn_thread. */
        unsigned char *old = atomic_exchange_explicit(slot, b.ptr, memory_order_acq_rel);
        if (old != NULL) {
            block_t ob;
            if (block_from_sized(old, a->p->min, a->p->max, &ob))
                block_free(ob);
            else
                damaged++;
        }
    }
    if (damaged) atomic_fetch_add_explicit(a->errors, damaged, memory_order_relaxed);
    return NULL;
}

static void drain_sized(_Atomic(unsigned char *) *slots, const params_t *p, thread_run_t *run) {
    for (size_t i = 0; i < p->ws; i++) {
        unsigned char *ptr = atomic_load(&slots[i]);
        if (ptr == NULL) continue;
        block_t b;
        if (block_from_sized(ptr, p->min, p->max, &b))
            block_free(b);
        else
            run->errors++;
    }
    free(slots);
}

/* The main thread draws each thread's seed before starting it
 * (workloads.rs: rethread). */
static thread_run_t run_rethread(const params_t *p) {
    _Atomic(unsigned char *) *slots = calloc(p->ws, sizeof *slots);
    if (slots == NULL) out_of_memory(p->ws * sizeof *slots);
    for (size_t i = 0; i < p->ws; i++) atomic_init(&slots[i], NULL);
    atomic_uint_fast64_t errors = 0;
    rng_t rng = {p->seed};
    pthread_t threads[p->threads];
    rethread_arg_t args[p->threads];
    warm_up(p->min);
    thread_run_t run = {0};
    run.start_ns = now_ns();
    for (uint64_t round = 0; round < p->iters; round++) {
        for (size_t t = 0; t < p->threads; t++) {
            args[t] = (rethread_arg_t){p, slots, rng_next(&rng), &errors};
            if (pthread_create(&threads[t], NULL, rethread_thread, &args[t]) != 0) {
                fprintf(stderr, "bench: pthread_create failed\n");
                exit(1);
            }
        }
        for (size_t t = 0; t < p->threads; t++) pthread_join(threads[t], NULL);
    }
    run.end_ns = now_ns();
    run.ops = p->iters * p->threads * RETHREAD_EXCHANGES;
    run.errors = atomic_load(&errors);
    drain_sized(slots, p, &run);
    return run;
}

/* The main thread draws each thread's slot, then size, before starting it
 * (workloads.rs: churn). */
static thread_run_t run_churn(const params_t *p) {
    _Atomic(unsigned char *) *slots = calloc(p->ws, sizeof *slots);
    if (slots == NULL) out_of_memory(p->ws * sizeof *slots);
    for (size_t i = 0; i < p->ws; i++) atomic_init(&slots[i], NULL);
    atomic_uint_fast64_t errors = 0;
    rng_t rng = {p->seed};
    pthread_t threads[p->threads];
    churn_arg_t args[p->threads];
    warm_up(p->min);
    thread_run_t run = {0};
    run.start_ns = now_ns();
    for (uint64_t round = 0; round < p->iters; round++) {
        for (size_t t = 0; t < p->threads; t++) {
            _Atomic(unsigned char *) *slot = &slots[rng_below(&rng, p->ws)];
            size_t size = rng_in_range(&rng, p->min, p->max);
            args[t] = (churn_arg_t){p, slot, size, &errors};
            if (pthread_create(&threads[t], NULL, churn_thread, &args[t]) != 0) {
                fprintf(stderr, "bench: pthread_create failed\n");
                exit(1);
            }
        }
        for (size_t t = 0; t < p->threads; t++) pthread_join(threads[t], NULL);
    }
    run.end_ns = now_ns();
    run.ops = p->iters * p->threads;
    run.errors = atomic_load(&errors);
    drain_sized(slots, p, &run);
    return run;
}

/* ---- pacing ---- */

/* One pair's ring of capacity = 2 WS slots: the producer fills slot
 * j % capacity, then publishes tail = j + 1; the consumer empties it, then
 * publishes head = j + 1 (workloads.rs: Ring). */
typedef struct {
    block_t *slots;
    uint64_t capacity;
    _Alignas(128) atomic_uint_fast64_t tail;
    _Alignas(128) atomic_uint_fast64_t head;
} ring_t;

typedef struct {
    const params_t *p;
    size_t index;
    ring_t *ring;
    pthread_barrier_t *barrier;
    thread_run_t run;
} pacing_arg_t;

static void backoff(unsigned *spins) {
    if (*spins < SPINS_BEFORE_YIELD) {
        (*spins)++;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

static void *pacing_producer(void *arg) {
    pacing_arg_t *a = arg;
    const params_t *p = a->p;
    ring_t *r = a->ring;
    rng_t rng = rng_for_thread(p->seed, a->index);
    uint64_t head = 0;
    unsigned spins = 0;
    warm_up(p->min);
    pthread_barrier_wait(a->barrier);
    uint64_t start = now_ns();
    for (uint64_t j = 0; j < p->iters; j++) {
        block_t b = block_alloc(rng_in_range(&rng, p->min, p->max));
        while (j - head >= r->capacity) {
            /* Pairs with the consumer's release store of head. */
            head = atomic_load_explicit(&r->head, memory_order_acquire);
            if (j - head >= r->capacity) backoff(&spins);
        }
        spins = 0;
        r->slots[j % r->capacity] = b;
        /* Publishes the slot and the stamp to the consumer. */
        atomic_store_explicit(&r->tail, j + 1, memory_order_release);
    }
    a->run = (thread_run_t){start, now_ns(), p->iters, 0};
    return NULL;
}

static void *pacing_consumer(void *arg) {
    pacing_arg_t *a = arg;
    const params_t *p = a->p;
    ring_t *r = a->ring;
    uint64_t lag = p->ws, tail = 0, errors = 0;
    unsigned spins = 0;
    warm_up(p->min);
    pthread_barrier_wait(a->barrier);
    uint64_t start = now_ns();
    for (uint64_t j = 0; j < p->iters; j++) {
        /* Block j goes once lag newer blocks are queued behind it, or once
         * the producer has published its last one. */
        while (tail <= j + lag && tail < p->iters) {
            /* Pairs with the producer's release store of tail. */
            tail = atomic_load_explicit(&r->tail, memory_order_acquire);
            if (tail <= j + lag && tail < p->iters) backoff(&spins);
        }
        spins = 0;
        block_t b = r->slots[j % r->capacity];
        errors += !block_intact(b);
        block_free(b);
        /* The read of slot j happens-before the producer reuses it. */
        atomic_store_explicit(&r->head, j + 1, memory_order_release);
    }
    a->run = (thread_run_t){start, now_ns(), p->iters, errors};
    return NULL;
}

/* ---- driver ---- */

static void start_thread(pthread_t *thread, void *(*body)(void *), void *arg) {
    if (pthread_create(thread, NULL, body, arg) != 0) {
        fprintf(stderr, "bench: pthread_create failed\n");
        exit(1);
    }
}

/* Runs the kernel; `runs` receives one entry per thread, returns the count. */
static size_t run_kernel(const params_t *p, thread_run_t *runs) {
    if (strcmp(p->kernel, "mixed") == 0) {
        runs[0] = run_mixed(p, (rng_t){p->seed}, NULL);
        return 1;
    }
    if (strcmp(p->kernel, "fixed") == 0) {
        runs[0] = run_fixed(p);
        return 1;
    }
    if (strcmp(p->kernel, "realloc") == 0) {
        runs[0] = run_realloc(p);
        return 1;
    }
    if (strcmp(p->kernel, "huge") == 0) {
        runs[0] = run_huge(p);
        return 1;
    }
    if (strcmp(p->kernel, "churn") == 0) {
        runs[0] = run_churn(p);
        return 1;
    }
    if (strcmp(p->kernel, "rethread") == 0) {
        runs[0] = run_rethread(p);
        return 1;
    }
    pthread_t threads[p->threads + 2];
    pthread_barrier_t barrier;
    if (strcmp(p->kernel, "mt-mixed") == 0) {
        mixed_arg_t args[p->threads];
        pthread_barrier_init(&barrier, NULL, (unsigned)p->threads);
        for (size_t t = 0; t < p->threads; t++) {
            args[t] = (mixed_arg_t){p, t, &barrier, {0}};
            start_thread(&threads[t], mixed_thread, &args[t]);
        }
        for (size_t t = 0; t < p->threads; t++) {
            pthread_join(threads[t], NULL);
            runs[t] = args[t].run;
        }
        return p->threads;
    }
    if (strcmp(p->kernel, "larson") == 0) {
        larson_arg_t args[p->threads];
        mailbox_t mailboxes[p->threads];
        atomic_size_t finished = 0;
        pthread_barrier_init(&barrier, NULL, (unsigned)p->threads);
        for (size_t t = 0; t < p->threads; t++) {
            mailboxes[t] = (mailbox_t){.items = NULL, .len = 0, .cap = 0};
            pthread_mutex_init(&mailboxes[t].lock, NULL);
        }
        for (size_t t = 0; t < p->threads; t++) {
            args[t] = (larson_arg_t){p, t, mailboxes, &finished, &barrier, {0}};
            start_thread(&threads[t], larson_thread, &args[t]);
        }
        for (size_t t = 0; t < p->threads; t++) {
            pthread_join(threads[t], NULL);
            runs[t] = args[t].run;
        }
        for (size_t t = 0; t < p->threads; t++) free(mailboxes[t].items);
        return p->threads;
    }
    size_t pairs = p->threads / 2;
    if (strcmp(p->kernel, "pacing") == 0) {
        ring_t rings[pairs];
        pacing_arg_t args[2 * pairs];
        pthread_barrier_init(&barrier, NULL, (unsigned)(2 * pairs));
        for (size_t i = 0; i < pairs; i++) {
            rings[i].capacity = 2 * (uint64_t)p->ws;
            rings[i].slots = calloc(rings[i].capacity, sizeof(block_t));
            if (rings[i].slots == NULL) out_of_memory(rings[i].capacity * sizeof(block_t));
            atomic_init(&rings[i].tail, 0);
            atomic_init(&rings[i].head, 0);
        }
        for (size_t i = 0; i < pairs; i++) {
            args[2 * i] = (pacing_arg_t){p, i, &rings[i], &barrier, {0}};
            args[2 * i + 1] = (pacing_arg_t){p, i, &rings[i], &barrier, {0}};
            start_thread(&threads[2 * i], pacing_producer, &args[2 * i]);
            start_thread(&threads[2 * i + 1], pacing_consumer, &args[2 * i + 1]);
        }
        for (size_t t = 0; t < 2 * pairs; t++) {
            pthread_join(threads[t], NULL);
            runs[t] = args[t].run;
        }
        for (size_t i = 0; i < pairs; i++) free(rings[i].slots);
        return 2 * pairs;
    }
    /* prodcons */
    queue_t *queues = calloc(pairs, sizeof *queues);
    if (queues == NULL) out_of_memory(pairs * sizeof *queues);
    prodcons_arg_t args[2 * pairs];
    pthread_barrier_init(&barrier, NULL, (unsigned)(2 * pairs));
    for (size_t i = 0; i < pairs; i++) {
        pthread_mutex_init(&queues[i].lock, NULL);
        pthread_cond_init(&queues[i].not_full, NULL);
        pthread_cond_init(&queues[i].not_empty, NULL);
    }
    for (size_t i = 0; i < pairs; i++) {
        args[2 * i] = (prodcons_arg_t){p, i, &queues[i], &barrier, {0}};
        args[2 * i + 1] = (prodcons_arg_t){p, i, &queues[i], &barrier, {0}};
        start_thread(&threads[2 * i], producer, &args[2 * i]);
        start_thread(&threads[2 * i + 1], consumer, &args[2 * i + 1]);
    }
    for (size_t t = 0; t < 2 * pairs; t++) {
        pthread_join(threads[t], NULL);
        runs[t] = args[t].run;
    }
    free(queues);
    return 2 * pairs;
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    if (*s < '0' || *s > '9') return 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') return 0;
    *out = v;
    return 1;
}

static _Noreturn void usage(const char *why) {
    fprintf(stderr, "bench: %s\nusage: bench KERNEL MIN MAX WS ITERS SEED THREADS WORKLOAD ALLOCATOR\n", why);
    exit(EXIT_USAGE);
}

/* A failed LD_PRELOAD only warns and runs with glibc; that must not pass
 * for a measurement of the preloaded allocator. Every entry of the list
 * (ld.so separates them with colons or spaces; valgrind, for one, puts its
 * own library first) must be loaded. */
static void check_preloaded(void) {
    const char *preload = getenv("LD_PRELOAD");
    if (preload == NULL) return;
    for (const char *s = preload; *s != '\0'; s += *s != '\0') {
        size_t len = strcspn(s, ": ");
        if (len == 0) continue;
        char entry[4096];
        int loaded = len < sizeof entry;
        if (loaded) {
            memcpy(entry, s, len);
            entry[len] = '\0';
            loaded = dlopen(entry, RTLD_LAZY | RTLD_NOLOAD) != NULL;
        }
        if (!loaded) {
            fprintf(stderr, "bench: LD_PRELOAD=%s: %.*s is not loaded\n", preload, (int)len, s);
            exit(EXIT_NOT_PRELOADED);
        }
        s += len;
    }
}

int main(int argc, char **argv) {
    if (argc != 10) usage("expected 9 arguments");
    uint64_t min, max, ws, iters, seed, threads;
    if (!parse_u64(argv[2], &min) || !parse_u64(argv[3], &max) || !parse_u64(argv[4], &ws) ||
        !parse_u64(argv[5], &iters) || !parse_u64(argv[6], &seed) || !parse_u64(argv[7], &threads))
        usage("MIN MAX WS ITERS SEED THREADS must be unsigned integers");
    if (min < 1 || min > max || max > MAX_BLOCK_SIZE) usage("need 1 <= MIN <= MAX <= 1 GiB");
    if (ws < 1 || iters < 1 || threads < 1 || threads > 1024) usage("need WS, ITERS >= 1 and 1 <= THREADS <= 1024");
    const char *kernels[] = {"mixed", "fixed", "mt-mixed", "larson", "prodcons", "realloc", "huge", "churn", "pacing", "rethread"};
    int known = 0;
    for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++) known |= strcmp(argv[1], kernels[i]) == 0;
    if (!known) usage("unknown KERNEL");
    if ((strcmp(argv[1], "churn") == 0 || strcmp(argv[1], "rethread") == 0) && min < CHURN_MIN_SIZE)
        usage("churn and rethread need MIN >= 24");
    if ((strcmp(argv[1], "prodcons") == 0 || strcmp(argv[1], "pacing") == 0) && threads < 2)
        usage("prodcons and pacing need THREADS >= 2 (one producer/consumer pair)");
    check_preloaded();

    params_t p = {argv[1], (size_t)min, (size_t)max, (size_t)ws, iters, seed, (size_t)threads};
    static thread_run_t runs[1024];
    size_t n = run_kernel(&p, runs);
    uint64_t start = runs[0].start_ns, end = runs[0].end_ns, ops = 0, errors = 0;
    for (size_t i = 0; i < n; i++) {
        if (runs[i].start_ns < start) start = runs[i].start_ns;
        if (runs[i].end_ns > end) end = runs[i].end_ns;
        ops += runs[i].ops;
        errors += runs[i].errors;
    }
    struct rusage usage_self;
    long maxrss = getrusage(RUSAGE_SELF, &usage_self) == 0 ? usage_self.ru_maxrss : 0;
    printf("hakmem-bench-result workload=%s allocator=%s ops=%" PRIu64 " elapsed_ns=%" PRIu64 " errors=%" PRIu64
           " maxrss_kib=%ld\n",
           argv[8], argv[9], ops, end - start, errors, maxrss);
    return 0;
}
