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
 *   KERNEL is mixed, fixed, mt-mixed, larson, prodcons or realloc;
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

/* A bounded queue of batches (static: the harness does not allocate). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_full, not_empty;
    batch_t ring[PRODCONS_DEPTH];
    size_t head, count;
    int done;
} queue = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .not_full = PTHREAD_COND_INITIALIZER,
    .not_empty = PTHREAD_COND_INITIALIZER,
};

typedef struct {
    const params_t *p;
    pthread_barrier_t *barrier;
    thread_run_t run;
} prodcons_arg_t;

static void queue_push(const batch_t *batch) {
    pthread_mutex_lock(&queue.lock);
    while (queue.count == PRODCONS_DEPTH) pthread_cond_wait(&queue.not_full, &queue.lock);
    queue.ring[(queue.head + queue.count) % PRODCONS_DEPTH] = *batch;
    queue.count++;
    pthread_cond_signal(&queue.not_empty);
    pthread_mutex_unlock(&queue.lock);
}

static void *producer(void *arg) {
    prodcons_arg_t *a = arg;
    const params_t *p = a->p;
    rng_t rng = rng_for_thread(p->seed, 0);
    batch_t batch = {.len = 0};
    warm_up(p->min);
    pthread_barrier_wait(a->barrier);
    uint64_t start = now_ns();
    for (uint64_t i = 0; i < p->iters; i++) {
        batch.blocks[batch.len++] = block_alloc(rng_in_range(&rng, p->min, p->max));
        if (batch.len == PRODCONS_BATCH) {
            queue_push(&batch);
            batch.len = 0;
        }
    }
    if (batch.len > 0) queue_push(&batch);
    pthread_mutex_lock(&queue.lock);
    queue.done = 1;
    pthread_cond_signal(&queue.not_empty);
    pthread_mutex_unlock(&queue.lock);
    a->run = (thread_run_t){start, now_ns(), p->iters, 0};
    return NULL;
}

static void *consumer(void *arg) {
    prodcons_arg_t *a = arg;
    batch_t batch;
    uint64_t ops = 0, errors = 0;
    warm_up(a->p->min);
    pthread_barrier_wait(a->barrier);
    uint64_t start = now_ns();
    for (;;) {
        pthread_mutex_lock(&queue.lock);
        while (queue.count == 0 && !queue.done) pthread_cond_wait(&queue.not_empty, &queue.lock);
        if (queue.count == 0) {
            pthread_mutex_unlock(&queue.lock);
            break;
        }
        batch = queue.ring[queue.head];
        queue.head = (queue.head + 1) % PRODCONS_DEPTH;
        queue.count--;
        pthread_cond_signal(&queue.not_full);
        pthread_mutex_unlock(&queue.lock);
        ops += batch.len;
        for (size_t i = 0; i < batch.len; i++) {
            errors += !block_intact(batch.blocks[i]);
            block_free(batch.blocks[i]);
        }
    }
    a->run = (thread_run_t){start, now_ns(), ops, errors};
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
    /* prodcons */
    prodcons_arg_t args[2] = {{p, &barrier, {0}}, {p, &barrier, {0}}};
    pthread_barrier_init(&barrier, NULL, 2);
    start_thread(&threads[0], producer, &args[0]);
    start_thread(&threads[1], consumer, &args[1]);
    pthread_join(threads[0], NULL);
    pthread_join(threads[1], NULL);
    runs[0] = args[0].run;
    runs[1] = args[1].run;
    return 2;
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
    const char *kernels[] = {"mixed", "fixed", "mt-mixed", "larson", "prodcons", "realloc"};
    int known = 0;
    for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++) known |= strcmp(argv[1], kernels[i]) == 0;
    if (!known) usage("unknown KERNEL");
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
