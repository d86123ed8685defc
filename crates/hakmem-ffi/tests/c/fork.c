/*
 * fork() while other threads are allocating.
 *
 * WORKERS threads allocate, realloc and free in a loop for the whole run.
 * Meanwhile main forks FORKS times. Each child checks and frees a block the
 * parent allocated before the fork, allocates and frees a few thousand
 * blocks of mixed sizes, starts a thread that does the same, and exits 0
 * (with _exit, so nothing of the parent's is flushed twice). A child that
 * deadlocks on an allocator lock held by a thread that does not exist in
 * the child hangs: the test harness kills the run after a time limit.
 *
 * Output is deterministic; exits non-zero when a child failed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { WORKERS = 3, FORKS = 25, CHILD_BLOCKS = 3000 };

static atomic_int stop;

static size_t mixed_size(unsigned *rng) {
    *rng = *rng * 1103515245u + 12345u;
    unsigned r = *rng >> 8;
    switch (r % 16) {
    case 0: return 65536 + r % 300000;
    case 1: return ((size_t)2 << 20) + r % 4096;
    default: return 1 + r % 2048;
    }
}

static void *worker(void *arg) {
    unsigned rng = (unsigned)(size_t)arg + 1;
    void *ring[64] = {0};
    size_t i = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        size_t slot = i++ % 64;
        free(ring[slot]);
        size_t size = mixed_size(&rng);
        ring[slot] = malloc(size);
        if (ring[slot] == NULL) abort();
        memset(ring[slot], (int)slot, size < 256 ? size : 256);
        if (i % 5 == 0) {
            void *q = realloc(ring[slot], size + 100);
            if (q == NULL) abort();
            ring[slot] = q;
        }
    }
    for (size_t k = 0; k < 64; k++) free(ring[k]);
    return NULL;
}

/* Allocation work done in the child; returns the number of problems found. */
static int child_work(unsigned seed) {
    int problems = 0;
    unsigned rng = seed;
    void **blocks = calloc(CHILD_BLOCKS, sizeof *blocks);
    if (blocks == NULL) return 1;
    for (int i = 0; i < CHILD_BLOCKS; i++) {
        size_t size = mixed_size(&rng);
        blocks[i] = malloc(size);
        if (blocks[i] == NULL) return problems + 1;
        memset(blocks[i], i & 0xff, size < 64 ? size : 64);
    }
    for (int i = 0; i < CHILD_BLOCKS; i++) {
        if (((unsigned char *)blocks[i])[0] != (i & 0xff)) problems++;
        free(blocks[i]);
    }
    free(blocks);
    return problems;
}

static void *child_thread(void *arg) {
    int *problems = arg;
    *problems = child_work(99);
    return NULL;
}

int main(void) {
    pthread_t workers[WORKERS];
    for (int i = 0; i < WORKERS; i++) pthread_create(&workers[i], NULL, worker, (void *)(size_t)i);

    int failed = 0;
    for (int round = 0; round < FORKS; round++) {
        char *inherited = malloc(100);
        snprintf(inherited, 100, "round %d", round);
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            char expected[100];
            snprintf(expected, sizeof expected, "round %d", round);
            int problems = strcmp(inherited, expected) != 0;
            free(inherited);
            problems += child_work((unsigned)round);
            pthread_t t;
            int thread_problems = 0;
            if (pthread_create(&t, NULL, child_thread, &thread_problems) != 0) _exit(3);
            pthread_join(t, NULL);
            _exit(problems + thread_problems == 0 ? 0 : 4);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child of round %d: status %#x\n", round, status);
            failed++;
        }
        free(inherited);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++) pthread_join(workers[i], NULL);
    printf("fork: %d children, %d failed\n", FORKS, failed);
    return failed == 0 ? 0 : 1;
}
