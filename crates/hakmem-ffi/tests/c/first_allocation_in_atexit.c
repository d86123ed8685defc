/*
 * The program's first allocation made by glibc inside `atexit` or
 * `pthread_atfork`, as they grow their lists while holding their lock:
 * glibc's exit-handler list holds 32 entries before it `calloc`s more,
 * its fork-handler list 48. A constructor of the program registers 40
 * exit handlers (mode `atexit`) or 60 sets of fork handlers (mode
 * `atfork`) before anything else allocates. An allocator that registers
 * its own handlers at its first allocation waits there for the lock its
 * own thread holds: the test harness kills the run after a time limit.
 *
 * Then every handler must run: at `exit` (the first one registered runs
 * last and prints the count), or at a `fork` (the child and the parent
 * each count theirs, and the child allocates).
 *
 * Output is deterministic; exits non-zero when a check failed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { EXIT_HANDLERS = 40, FORK_HANDLERS = 60 };

static int mode_atfork;
static int exit_ran, prepare_ran, parent_ran, child_ran;

static void count_exit(void) { exit_ran++; }

/* Registered first, so it runs last. */
static void report_exit(void) {
    printf("%d exit handlers ran\n", exit_ran);
    fflush(stdout);
    if (exit_ran != EXIT_HANDLERS - 1) _exit(3);
}

static void count_prepare(void) { prepare_ran++; }
static void count_parent(void) { parent_ran++; }
static void count_child(void) { child_ran++; }

/* glibc passes a constructor the program's arguments. */
__attribute__((constructor)) static void register_handlers(int argc, char **argv) {
    mode_atfork = argc > 1 && strcmp(argv[1], "atfork") == 0;
    if (mode_atfork) {
        for (int i = 0; i < FORK_HANDLERS; i++) {
            if (pthread_atfork(count_prepare, count_parent, count_child) != 0) abort();
        }
    } else {
        if (atexit(report_exit) != 0) abort();
        for (int i = 1; i < EXIT_HANDLERS; i++) {
            if (atexit(count_exit) != 0) abort();
        }
    }
}

int main(void) {
    char *p = malloc(100);
    if (p == NULL) return 1;
    strcpy(p, "allocated");
    printf("%s\n", p);
    free(p);
    if (!mode_atfork) return 0; /* report_exit checks the exit handlers */
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        char *q = malloc(5000);
        int ok = q != NULL && child_ran == FORK_HANDLERS;
        free(q);
        _exit(ok ? 0 : 4);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
    printf("%d prepare, %d parent handlers ran; the child's %d\n", prepare_ran, parent_ran, FORK_HANDLERS);
    return prepare_ran == FORK_HANDLERS && parent_ran == FORK_HANDLERS ? 0 : 6;
}
