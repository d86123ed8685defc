/*
 * Loads N copies of the hakmem plugin with dlopen and runs them from
 * several threads: tests/dlopen_plugins.rs.
 *
 * Usage: host DIR N THREADS. Loads DIR/plugin_<i>.so for i = 0 .. N-1
 * (RTLD_NOW | RTLD_LOCAL, kept loaded) and calls each one's plugin_run as
 * soon as it is loaded; then THREADS threads call every plugin's
 * plugin_run once more (threads the plugins never saw). Prints
 * "loaded <n>" and "ran <blocks>" on stdout.
 * Exit status: 0 done; 1 a dlopen failed (dlerror() on stderr); 2 bad
 * arguments; 3 a plugin reported a wrong block.
 *
 * Or: host mixed PLUGIN ITERS. Loads one plugin and runs its headline loop
 * (plugin_mixed) for ITERS operations; prints "<ns per operation>"
 * (docs/BENCHMARKS.md, "TLS in a dlopen'ed library").
 *
 * Or: host unload PLUGIN THREADS. Loads one plugin, has THREADS threads
 * allocate through it (each gets a heap of the plugin's hakmem, whose
 * thread-exit hook is registered then), unloads it with dlclose while
 * they wait, then lets them exit: the hooks run after the dlclose.
 * Prints "exited <threads>" (issue 22: the exit crashed when dlclose had
 * unmapped the plugin).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLUGINS 1000
#define PLUGIN_THREADS 3

typedef uint64_t (*run_fn)(uint64_t seed, uint32_t threads);

static run_fn runs[MAX_PLUGINS];
static int loaded;
static _Atomic int failed;

static void *call_every_plugin(void *arg) {
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < loaded; i++)
        if (runs[i](seed * 1000 + (uint64_t)i, PLUGIN_THREADS) == 0) failed = 1;
    return NULL;
}

typedef uint64_t (*mixed_fn)(uint64_t iters);

static int mixed(const char *path, const char *iters_arg) {
    long long iters = atoll(iters_arg);
    void *plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (plugin == NULL || iters < 1) {
        fprintf(stderr, "host: dlopen %s: %s\n", path, plugin == NULL ? dlerror() : "bad ITERS");
        return 1;
    }
    mixed_fn run = (mixed_fn)dlsym(plugin, "plugin_mixed");
    if (run == NULL) {
        fprintf(stderr, "host: dlsym %s: %s\n", path, dlerror());
        return 1;
    }
    uint64_t ns = run((uint64_t)iters);
    printf("%.3f\n", (double)ns / (double)iters);
    return 0;
}

static pthread_barrier_t allocated, unloaded;

typedef uint64_t (*touch_fn)(size_t size);

static void *allocate_then_wait(void *arg) {
    touch_fn touch = (touch_fn)arg;
    if (touch(1000) != 1000) failed = 1;
    pthread_barrier_wait(&allocated);
    pthread_barrier_wait(&unloaded);
    return NULL;
}

static int unload(const char *path, const char *threads_arg) {
    int threads = atoi(threads_arg);
    if (threads < 1 || threads > 64) return 2;
    void *plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (plugin == NULL) {
        fprintf(stderr, "host: dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    touch_fn touch = (touch_fn)dlsym(plugin, "plugin_touch");
    if (touch == NULL) {
        fprintf(stderr, "host: dlsym %s: %s\n", path, dlerror());
        return 1;
    }
    pthread_barrier_init(&allocated, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&unloaded, NULL, (unsigned)threads + 1);
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, allocate_then_wait, (void *)touch) != 0) return 2;
    pthread_barrier_wait(&allocated);
    if (dlclose(plugin) != 0) {
        fprintf(stderr, "host: dlclose: %s\n", dlerror());
        return 1;
    }
    pthread_barrier_wait(&unloaded);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    if (failed) {
        fprintf(stderr, "host: the plugin reported a wrong block\n");
        return 3;
    }
    printf("exited %d\n", threads);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "mixed") == 0) return mixed(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "unload") == 0) return unload(argv[2], argv[3]);
    if (argc != 4) {
        fprintf(stderr, "usage: host DIR N THREADS\n");
        return 2;
    }
    int n = atoi(argv[2]), threads = atoi(argv[3]);
    if (n < 1 || n > MAX_PLUGINS || threads < 1 || threads > 64) {
        fprintf(stderr, "host: need 1 <= N <= %d and 1 <= THREADS <= 64\n", MAX_PLUGINS);
        return 2;
    }
    uint64_t blocks = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/plugin_%d.so", argv[1], i);
        void *plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (plugin == NULL) {
            printf("loaded %d\n", loaded);
            fprintf(stderr, "host: dlopen %s: %s\n", path, dlerror());
            return 1;
        }
        runs[i] = (run_fn)dlsym(plugin, "plugin_run");
        if (runs[i] == NULL) {
            fprintf(stderr, "host: dlsym %s: %s\n", path, dlerror());
            return 1;
        }
        loaded = i + 1;
        uint64_t b = runs[i]((uint64_t)i, PLUGIN_THREADS);
        if (b == 0) {
            fprintf(stderr, "host: plugin %d reported a wrong block\n", i);
            return 3;
        }
        blocks += b;
    }
    printf("loaded %d\n", loaded);
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, call_every_plugin, (void *)(uintptr_t)(i + 1)) != 0) return 2;
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    if (failed) {
        fprintf(stderr, "host: a plugin reported a wrong block\n");
        return 3;
    }
    printf("ran %llu\n", (unsigned long long)blocks);
    return 0;
}
