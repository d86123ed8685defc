/*
 * fork() handlers of the program that allocate and free.
 *
 * The handlers are registered from the executable's `.preinit_array`,
 * which runs before any constructor, so before the allocator registers
 * its own (hakmem does in a constructor, or at its first allocation if
 * that comes first): prepare handlers run in the reverse order of
 * registration, parent and child handlers in that order, so these run
 * while the allocator's prepare handler holds its locks. Each allocates
 * and frees blocks of every kind (small, large, huge), and a block the
 * prepare handler allocates is freed by the parent and by the child
 * handler (each in its own copy). In the first fork the handlers also
 * ask for the statistics (`malloc_stats`, to stderr) and give memory back
 * (`malloc_trim`); in the second, the prepare handler forks too. The
 * child also allocates on a new thread. An allocator whose locks are not
 * taken again by the forking thread deadlocks in the first fork: the test
 * harness kills the run after a time limit. (Fully static, glibc's
 * start-up allocates before the `.preinit_array` runs: the allocator
 * registers first, and these handlers run outside its window.)
 *
 * Output is deterministic; exits non-zero when a check failed.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { FORKS = 10 };

static const size_t SIZES[] = {24, 700, 5000, 200 << 10, 3 << 20};
static char *from_prepare;
static int failures;
static int forks_done;

static void churn(unsigned char tag) {
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++) {
        unsigned char *p = malloc(SIZES[i]);
        if (p == NULL) {
            failures++;
            continue;
        }
        memset(p, tag, SIZES[i]);
        p = realloc(p, SIZES[i] / 2 + 1);
        if (p == NULL || p[SIZES[i] / 2] != tag) failures++;
        free(p);
    }
}

/* A fork from inside the second fork's prepare handler (glibc runs the
 * handlers again for it): its child allocates and exits; the outer fork's
 * window must stay open for the handlers that follow. */
static int nested_done;

static void nested_fork(void) {
    nested_done = 1;
    pid_t pid = fork();
    if (pid == 0) {
        churn(5);
        _exit(failures == 0 ? 0 : 1);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failures++;
}

static void prepare(void) {
    if (forks_done == 1 && !nested_done) nested_fork();
    if (forks_done == 0) {
        malloc_stats();
        malloc_trim(0);
    }
    churn(1);
    from_prepare = malloc(1000);
    if (from_prepare == NULL) {
        failures++;
        return;
    }
    memset(from_prepare, 7, 1000);
}

static void after(void) {
    if (forks_done == 0) {
        malloc_stats();
        malloc_trim(0);
    }
    churn(2);
    if (from_prepare == NULL || from_prepare[999] != 7) failures++;
    free(from_prepare);
    from_prepare = NULL;
}

static void register_handlers(void) {
    if (pthread_atfork(prepare, after, after) != 0) abort();
}

/* Before every constructor, the allocator's included (it registers its
 * handlers in one). */
__attribute__((section(".preinit_array"), used)) static void (*const register_first)(void) = register_handlers;

static void *child_thread(void *arg) {
    (void)arg;
    churn(3);
    return NULL;
}

int main(void) {
    int failed = 0;
    /* The allocator's first heap (and its fork handlers), after ours. */
    void *volatile first = malloc(1);
    free(first);
    for (int i = 0; i < FORKS; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            pthread_t t;
            churn(4);
            if (pthread_create(&t, NULL, child_thread, NULL) != 0 || pthread_join(t, NULL) != 0) failures++;
            _exit(failures == 0 ? 0 : 1);
        }
        forks_done++;
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    printf("%d forks, %d failed, %d failures in the parent\n", FORKS, failed, failures);
    return failed == 0 && failures == 0 ? 0 : 1;
}
