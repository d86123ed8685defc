/*
 * The program's first allocation made by glibc inside `atexit` or
 * `pthread_atfork`, as they grow their lists while holding their lock:
 * glibc's exit-handler list holds 32 entries before it `calloc`s more,
 * its fork-handler list 48.
 *
 * Modes `atexit` and `atfork`: a constructor of the program registers 40
 * exit handlers or 60 sets of fork handlers before anything else
 * allocates. An allocator that registers its own handlers at its first
 * allocation waits there for the lock its own thread holds.
 *
 * Modes `atexit-full` and `atfork-full`: the executable's `.preinit_array`
 * (which runs before every constructor) fills the lists exactly (32 exit
 * handlers, 48 sets of fork handlers), so that the allocator's own
 * registration, in its constructor, is what grows them: the allocation
 * comes from inside the allocator's set-up, on a thread with no heap yet,
 * which must not wait for itself.
 *
 * A hang is killed by the test harness after a time limit. Then every
 * handler must run: at `exit` (the first one registered runs last and
 * prints the count), or at a `fork` (the child and the parent each count
 * theirs, and the child allocates).
 *
 * Output is deterministic; exits non-zero when a check failed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int exit_handlers, fork_handlers;
static int exit_ran, prepare_ran, parent_ran, child_ran;

static void count_exit(void) { exit_ran++; }

/* Registered first, so it runs last. */
static void report_exit(void) {
    printf("%d exit handlers ran\n", exit_ran + 1);
    fflush(stdout);
    if (exit_ran != exit_handlers - 1) _exit(3);
}

static void count_prepare(void) { prepare_ran++; }
static void count_parent(void) { parent_ran++; }
static void count_child(void) { child_ran++; }

static void register_handlers(int argc, char **argv, int preinit) {
    const char *mode = argc > 1 ? argv[1] : "atexit";
    int full = strstr(mode, "-full") != NULL;
    if (full != preinit) return;
    if (strncmp(mode, "atfork", 6) == 0) {
        fork_handlers = full ? 48 : 60;
        for (int i = 0; i < fork_handlers; i++) {
            if (pthread_atfork(count_prepare, count_parent, count_child) != 0) abort();
        }
    } else {
        exit_handlers = full ? 32 : 40;
        if (atexit(report_exit) != 0) abort();
        for (int i = 1; i < exit_handlers; i++) {
            if (atexit(count_exit) != 0) abort();
        }
    }
}

/* glibc passes these functions the program's arguments. */
static void register_in_preinit(int argc, char **argv) { register_handlers(argc, argv, 1); }

__attribute__((section(".preinit_array"), used)) static void (*const preinit)(int, char **) = register_in_preinit;

__attribute__((constructor)) static void register_in_constructor(int argc, char **argv) {
    register_handlers(argc, argv, 0);
}

int main(void) {
    char *p = malloc(100);
    if (p == NULL) return 1;
    strcpy(p, "allocated");
    printf("%s\n", p);
    free(p);
    if (fork_handlers == 0) return 0; /* report_exit checks the exit handlers */
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        char *q = malloc(5000);
        int ok = q != NULL && child_ran == fork_handlers;
        free(q);
        _exit(ok ? 0 : 4);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
    printf("%d prepare, %d parent handlers ran; the child's %d\n", prepare_ran, parent_ran, fork_handlers);
    return prepare_ran == fork_handlers && parent_ran == fork_handlers ? 0 : 6;
}
