/*
 * A C program (no libstdc++ of its own) that loads a C++ plugin with
 * dlopen(RTLD_LOCAL) and runs it: see tests/cpp/plugin.cpp. Run with
 * LD_PRELOAD=libhakmem.so. Usage: plugin_host <path of libplugin.so>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <plugin.so>\n", argv[0]);
        return 2;
    }
    int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "hakmem_owns");
    if (owns == NULL) {
        fprintf(stderr, "hakmem_owns not found: is libhakmem.so preloaded?\n");
        return 2;
    }
    void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (plugin == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    int (*run)(int (*)(const void *)) = (int (*)(int (*)(const void *)))dlsym(plugin, "plugin_run");
    if (run == NULL) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 2;
    }
    int rc = run(owns);
    fflush(stdout);
    printf("plugin blocks %s hakmem's\n", rc == 0 ? "are" : "are not");
    return rc;
}
