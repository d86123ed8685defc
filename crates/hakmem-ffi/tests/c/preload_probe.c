/*
 * Says whether hakmem is this process's allocator, without linking to it:
 * prints "hakmem VERSION owns-malloc=1 owns-strdup=1" when libhakmem.so is
 * preloaded, "no hakmem" otherwise.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    const char *(*version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "hakmem_version");
    int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "hakmem_owns");
    if (version == NULL || owns == NULL) {
        printf("no hakmem\n");
        return 0;
    }
    void *p = malloc(100);
    char *s = strdup("probe");
    printf("hakmem %s owns-malloc=%d owns-strdup=%d\n", version(), owns(p), owns(s));
    free(s);
    free(p);
    return 0;
}
