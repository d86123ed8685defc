/* The heap profiler from outside (tests/profile.rs): call sites that hold
 * known amounts, one that churns, blocks made in threads and freed by
 * another, and a fork. Built at -O2 without frame pointers or debug
 * information: the stacks come from DWARF unwinding, the names from the
 * symbol table. Every site is its own noinline function. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG 300
#define SMALL 100
#define COUNT 200000

static void *kept[2 * COUNT + 4 * 10000];
static int nkept;

__attribute__((noinline)) void hold_big(int n) {
    for (int i = 0; i < n; i++) {
        kept[nkept] = malloc(BIG);
        memset(kept[nkept++], 1, BIG);
    }
}

__attribute__((noinline)) void hold_small(int n) {
    for (int i = 0; i < n; i++) {
        kept[nkept] = malloc(SMALL);
        memset(kept[nkept++], 2, SMALL);
    }
}

__attribute__((noinline)) void churn(int n) {
    for (int i = 0; i < n; i++) {
        char *volatile p = malloc(200);
        p[0] = 3;
        free(p);
    }
}

static int dump(const char *path) {
    int (*fn)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "hakmem_profile_dump");
    if (!fn) {
        fprintf(stderr, "hakmem_profile_dump not found\n");
        exit(2);
    }
    return fn(path);
}

/* Dumps to the path `arg` 10 times: NULL when all succeeded. */
static void *dump_often(void *arg) {
    for (int i = 0; i < 10; i++) {
        if (dump(arg) != 0) {
            perror("hakmem_profile_dump from a thread");
            return arg;
        }
    }
    return NULL;
}

/* Threads: each makes blocks that main frees after joining it, and keeps
 * others live. */
#define PRODUCED 20000
#define KEPT_PER_THREAD 10000
static void *produced[4][PRODUCED];

__attribute__((noinline)) void produce(void **out) {
    for (int i = 0; i < PRODUCED; i++) {
        out[i] = malloc(256);
        memset(out[i], 4, 256);
    }
}

__attribute__((noinline)) void keep_in_thread(void **out) {
    for (int i = 0; i < KEPT_PER_THREAD; i++) {
        out[i] = malloc(512);
        memset(out[i], 5, 512);
    }
}

static void *worker(void *arg) {
    long t = (long)arg;
    produce(produced[t]);
    keep_in_thread(&kept[2 * COUNT + t * KEPT_PER_THREAD]);
    return NULL;
}

__attribute__((noinline)) void in_child(int n) {
    for (int i = 0; i < n; i++) {
        kept[nkept] = malloc(BIG);
        memset(kept[nkept++], 6, BIG);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        return 2;
    }
    if (!strcmp(argv[1], "sites")) {
        /* sites DUMP_PATH: hold 60 MB and 20 MB, churn 200 MB, dump. */
        hold_big(COUNT);
        hold_small(COUNT);
        churn(5 * COUNT);
        if (dump(argv[2]) != 0) {
            perror("hakmem_profile_dump");
            return 1;
        }
        if (dump("") == 0) {
            fprintf(stderr, "an empty path was accepted\n");
            return 1;
        }
    } else if (!strcmp(argv[1], "keep")) {
        /* keep DUMP_PATH: a dump; one that fails (the file size limit:
         * EFBIG) must leave it whole, with the permissions given to it;
         * one that succeeds keeps those; 4 threads dumping to the path at
         * once all succeed; a device is written in place. */
        hold_big(COUNT / 4);
        if (dump(argv[2]) != 0) {
            perror("first hakmem_profile_dump");
            return 1;
        }
        struct stat first;
        if (chmod(argv[2], 0600) != 0 || stat(argv[2], &first) != 0 || first.st_size < 100) {
            fprintf(stderr, "no first profile\n");
            return 1;
        }
        hold_small(COUNT / 4);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit limit;
        getrlimit(RLIMIT_FSIZE, &limit);
        rlim_t soft = limit.rlim_cur;
        limit.rlim_cur = 64;
        if (setrlimit(RLIMIT_FSIZE, &limit) != 0) {
            perror("setrlimit");
            return 1;
        }
        errno = 0;
        if (dump(argv[2]) == 0 || errno != EFBIG) {
            fprintf(stderr, "the second dump did not fail with EFBIG: %s\n", strerror(errno));
            return 1;
        }
        struct stat after;
        if (stat(argv[2], &after) != 0 || after.st_size != first.st_size || (after.st_mode & 07777) != 0600) {
            fprintf(stderr, "the first profile changed: %lld bytes, then %lld (mode %o)\n",
                    (long long)first.st_size, (long long)after.st_size, (unsigned)(after.st_mode & 07777));
            return 1;
        }
        limit.rlim_cur = soft;
        if (setrlimit(RLIMIT_FSIZE, &limit) != 0) {
            perror("setrlimit");
            return 1;
        }
        pthread_t th[4];
        for (long t = 0; t < 4; t++) {
            pthread_create(&th[t], NULL, dump_often, argv[2]);
        }
        for (int t = 0; t < 4; t++) {
            void *failed;
            pthread_join(th[t], &failed);
            if (failed != NULL) {
                fprintf(stderr, "a dump from a thread failed\n");
                return 1;
            }
        }
        if (stat(argv[2], &after) != 0 || (after.st_mode & 07777) != 0600) {
            fprintf(stderr, "the permissions of the profile changed\n");
            return 1;
        }
        if (dump("/dev/null") != 0) {
            perror("hakmem_profile_dump(/dev/null)");
            return 1;
        }
    } else if (!strcmp(argv[1], "threads")) {
        pthread_t th[4];
        for (long t = 0; t < 4; t++) {
            pthread_create(&th[t], NULL, worker, (void *)t);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
        }
        for (int t = 0; t < 4; t++) {
            for (int i = 0; i < PRODUCED; i++) {
                free(produced[t][i]);
            }
        }
    } else if (!strcmp(argv[1], "fork")) {
        hold_big(COUNT / 4);
        pid_t pid = fork();
        if (pid == 0) {
            in_child(COUNT / 4);
            exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            return 1;
        }
    }
    printf("ok %d\n", nkept);
    return 0;
}
