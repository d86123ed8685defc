/*
 * A C++ plugin of a C program (tests/c/plugin_host.c loads it with dlopen,
 * RTLD_LOCAL): libstdc++ comes into the process only with this library,
 * after libhakmem.so was loaded and relocated, so hakmem's weak references
 * to the C++ runtime are null and it must find the runtime by name (the
 * case of python loading a C++ extension module).
 */
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>

static int handler_calls;

static void counting_handler() {
    if (++handler_calls >= 3) std::set_new_handler(nullptr);
}

static volatile std::size_t impossible_size = SIZE_MAX / 4;

/* Prints what the throwing and the nothrow new did with an impossible size
 * and a handler that gives up on its third call; 0 when the blocks of a
 * plain new are hakmem's (`owns`, from the host). */
extern "C" int plugin_run(int (*owns)(const void *)) {
    int *p = new int[100];
    int owned = owns(p);
    delete[] p;

    std::set_new_handler(counting_handler);
    const char *outcome = "returned";
    try {
        void *q = ::operator new(impossible_size);
        ::operator delete(q);
    } catch (const std::bad_alloc &) {
        outcome = "bad_alloc";
    }
    std::printf("new: %s, handler calls %d\n", outcome, handler_calls);

    handler_calls = 0;
    std::set_new_handler(counting_handler);
    void *r = ::operator new(impossible_size, std::nothrow);
    std::printf("nothrow new: %s, handler calls %d\n", r == nullptr ? "null" : "a block", handler_calls);
    std::set_new_handler(nullptr);
    return owned ? 0 : 1;
}
