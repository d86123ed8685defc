/*
 * hakmem's C++ operators, seen from a C++ program: every replaceable form of
 * operator new/delete, the new-handler and std::bad_alloc, aligned types,
 * sized delete, containers and threads, and glibc's heap statistics
 * (mallinfo2, mallinfo, malloc_stats, malloc_info) answering about hakmem.
 *
 * Built by tests/cpp_api.rs three ways: plain, run with
 * LD_PRELOAD=libhakmem.so (hakmem_* looked up with dlsym, and every operator
 * checked to resolve into libhakmem.so); with libhakmem.a linked in
 * (-DHAKMEM_LINKED), libstdc++ dynamic; and fully static (-static).
 *
 * Usage:
 *   operators                 every check; prints "operators: N checks, F failures"
 *   operators handler-frees   RLIMIT_AS exhausted by new[]: a new-handler frees
 *                             memory and new succeeds; then bad_alloc
 *   operators misuse <kind>   one misused delete (tests expect an abort):
 *                             aligned, aligned-sized, sized-stack,
 *                             sized-freed, unsized-stack
 */
#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hakmem.h"

/* mallinfo is deprecated in favour of mallinfo2; libhakmem exports both. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static int checks;
static int failures;

#define CHECK(cond)                                                               \
    do {                                                                          \
        checks++;                                                                 \
        if (!(cond)) {                                                            \
            failures++;                                                           \
            std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                         \
    } while (0)

/* Keeps the compiler from eliding an allocation whose result is unused. */
static void escape(void *p) { asm volatile("" : : "r"(p) : "memory"); }

/* A size no allocator can serve, hidden from the optimiser. */
static volatile std::size_t impossible_size = SIZE_MAX / 4;

#ifdef HAKMEM_LINKED
static int owns(const void *p) { return hakmem_owns(p); }
#else
static int owns(const void *p) {
    static int (*fn)(const void *) = nullptr;
    if (fn == nullptr) {
        fn = reinterpret_cast<int (*)(const void *)>(dlsym(RTLD_DEFAULT, "hakmem_owns"));
        if (fn == nullptr) {
            std::fprintf(stderr, "FATAL: hakmem_owns not found: is libhakmem.so preloaded?\n");
            std::exit(2);
        }
    }
    return fn(p);
}
#endif

static bool aligned(const void *p, std::size_t align) {
    return (reinterpret_cast<std::uintptr_t>(p) & (align - 1)) == 0;
}

/* A block from hakmem, aligned, writable end to end. */
static void check_block(void *p, std::size_t size, std::size_t align) {
    CHECK(p != nullptr);
    if (p == nullptr) return;
    CHECK(aligned(p, align));
    CHECK(owns(p));
    std::memset(p, 0x5a, size);
    escape(p);
}

/* ---- every operator, called by name ---- */

static void test_every_form() {
    const std::size_t sizes[] = {0, 1, 24, 100, 1000, 5000, 70000, (std::size_t)3 << 20};
    const std::size_t aligns[] = {8, 16, 32, 64, 256, 4096, 65536, (std::size_t)1 << 20};
    for (std::size_t size : sizes) {
        void *p = ::operator new(size);
        check_block(p, size, 16);
        ::operator delete(p);
        p = ::operator new(size);
        ::operator delete(p, size);
        p = ::operator new[](size);
        check_block(p, size, 16);
        ::operator delete[](p);
        p = ::operator new[](size);
        ::operator delete[](p, size);
        p = ::operator new(size, std::nothrow);
        check_block(p, size, 16);
        ::operator delete(p, std::nothrow);
        p = ::operator new[](size, std::nothrow);
        check_block(p, size, 16);
        ::operator delete[](p, std::nothrow);
        for (std::size_t align : aligns) {
            std::align_val_t a{align};
            p = ::operator new(size, a);
            check_block(p, size, align);
            ::operator delete(p, a);
            p = ::operator new(size, a);
            ::operator delete(p, size, a);
            p = ::operator new[](size, a);
            check_block(p, size, align);
            ::operator delete[](p, a);
            p = ::operator new[](size, a);
            ::operator delete[](p, size, a);
            p = ::operator new(size, a, std::nothrow);
            check_block(p, size, align);
            ::operator delete(p, a, std::nothrow);
            p = ::operator new[](size, a, std::nothrow);
            check_block(p, size, align);
            ::operator delete[](p, a, std::nothrow);
        }
    }
    /* new(0) is a unique block. */
    void *z1 = ::operator new(0), *z2 = ::operator new(0);
    CHECK(z1 != z2);
    ::operator delete(z1, std::size_t{0});
    ::operator delete(z2);
    /* delete of null does nothing, in every form. */
    ::operator delete(nullptr);
    ::operator delete(nullptr, std::size_t{8});
    ::operator delete[](nullptr, std::align_val_t{64});
    ::operator delete(nullptr, std::size_t{8}, std::align_val_t{64});
    /* A block from new can be freed with free (one heap). */
    std::free(::operator new(100));

#ifndef HAKMEM_LINKED
    /* Each operator (and each statistics function) resolves into libhakmem.so. */
    static const char *const names[] = {
        "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
        "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t",
        "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
        "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t",
        "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
        "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
        "mallinfo2", "mallinfo", "malloc_stats", "malloc_info", "free_sized", "free_aligned_sized",
    };
    for (const char *name : names) {
        Dl_info info;
        void *sym = dlsym(RTLD_DEFAULT, name);
        bool ok = sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr &&
                  std::strstr(info.dli_fname, "libhakmem.so") != nullptr;
        checks++;
        if (!ok) {
            failures++;
            std::fprintf(stderr, "FAIL: %s does not resolve to libhakmem.so\n", name);
        }
    }
    /* The address the program itself calls, too. */
    Dl_info info;
    void *(*plain_new)(std::size_t) = &::operator new;
    CHECK(dladdr(reinterpret_cast<void *>(plain_new), &info) != 0 && info.dli_fname != nullptr &&
          std::strstr(info.dli_fname, "libhakmem.so") != nullptr);
#endif
}

/* ---- new-expressions: aligned types, arrays, sized delete ---- */

struct alignas(64) Line64 {
    char bytes[100];
};
struct alignas(4096) Page4096 {
    char bytes[10];
};

struct Base {
    virtual ~Base() = default;
    virtual std::size_t size() const = 0;
};
/* Deleting through Base calls the sized operator delete with the dynamic
 * type's size (the deleting destructor knows it). */
template <std::size_t N>
struct Derived : Base {
    char payload[N];
    std::size_t size() const override { return sizeof(*this); }
};

static void test_expressions() {
    for (int round = 0; round < 100; round++) {
        Line64 *a = new Line64;
        check_block(a, sizeof *a, 64);
        Line64 *as = new Line64[7];
        check_block(as, 7 * sizeof *as, 64);
        Page4096 *b = new Page4096;
        check_block(b, sizeof *b, 4096);
        Page4096 *bs = new Page4096[3];
        check_block(bs, 3 * sizeof *bs, 4096);
        Page4096 *c = new (std::nothrow) Page4096;
        check_block(c, sizeof *c, 4096);
        Line64 *cs = new (std::nothrow) Line64[5];
        check_block(cs, 5 * sizeof *cs, 64);
        delete a;
        delete[] as;
        delete b;
        delete[] bs;
        delete c;
        delete[] cs;

        std::vector<std::unique_ptr<Base>> objects;
        for (int i = 0; i < 50; i++) {
            switch (i % 4) {
            case 0: objects.emplace_back(new Derived<8>); break;
            case 1: objects.emplace_back(new Derived<200>); break;
            case 2: objects.emplace_back(new Derived<5000>); break;
            default: objects.emplace_back(new Derived<300000>); break;
            }
            CHECK(owns(objects.back().get()));
        }
        std::size_t total = 0;
        for (auto &o : objects) total += o->size();
        CHECK(total > 0);
        objects.clear(); /* sized deletes through Base */

        int *ints = new int[1000]();
        CHECK(owns(ints) && ints[999] == 0);
        delete[] ints;
        std::string *strings = new std::string[10]; /* array cookie: sized delete[] */
        for (int i = 0; i < 10; i++) strings[i] = std::string(100 + i, 'x');
        CHECK(owns(strings));
        delete[] strings;
    }
}

/* ---- new-handler and std::bad_alloc ---- */

static int handler_calls;
static int handler_limit;

/* Gives up (uninstalls itself) on its handler_limit-th call. */
static void counting_handler() {
    if (++handler_calls >= handler_limit) std::set_new_handler(nullptr);
}
static void bad_alloc_handler() {
    ++handler_calls;
    throw std::bad_alloc();
}
static void int_handler() {
    ++handler_calls;
    throw 42;
}

/* One throwing form of new: which exception it ends in, and how often the
 * handler ran. */
enum Outcome { RETURNED, BAD_ALLOC, INT, OTHER };

template <typename F>
static Outcome outcome_of(F allocate) {
    try {
        void *p = allocate();
        escape(p);
        return RETURNED;
    } catch (const std::bad_alloc &) {
        return BAD_ALLOC;
    } catch (int) {
        return INT;
    } catch (...) {
        return OTHER;
    }
}

static void test_new_handler() {
    std::size_t n = impossible_size;
    std::align_val_t a64{64};
    /* Every throwing form, every nothrow form. */
    auto throwing = [&](int form) -> void * {
        switch (form) {
        case 0: return ::operator new(n);
        case 1: return ::operator new[](n);
        case 2: return ::operator new(n, a64);
        case 3: return ::operator new[](n, a64);
        case 4: return new char[n];
        default: return new Line64[n / 1024];
        }
    };
    auto nothrow = [&](int form) -> void * {
        switch (form) {
        case 0: return ::operator new(n, std::nothrow);
        case 1: return ::operator new[](n, std::nothrow);
        case 2: return ::operator new(n, a64, std::nothrow);
        case 3: return ::operator new[](n, a64, std::nothrow);
        case 4: return new (std::nothrow) char[n];
        default: return new (std::nothrow) Line64[n / 1024];
        }
    };
    for (int form = 0; form < 6; form++) {
        /* No handler: bad_alloc at once; nothrow: null. */
        std::set_new_handler(nullptr);
        CHECK(outcome_of([&] { return throwing(form); }) == BAD_ALLOC);
        CHECK(nothrow(form) == nullptr);

        /* A handler that gives up on its third call: called three times. */
        handler_calls = 0;
        handler_limit = 3;
        std::set_new_handler(counting_handler);
        CHECK(outcome_of([&] { return throwing(form); }) == BAD_ALLOC);
        CHECK(handler_calls == 3);
        CHECK(std::get_new_handler() == nullptr);
        handler_calls = 0;
        std::set_new_handler(counting_handler);
        CHECK(nothrow(form) == nullptr);
        CHECK(handler_calls == 3);

        /* A handler that throws bad_alloc: once; nothrow swallows it. */
        handler_calls = 0;
        std::set_new_handler(bad_alloc_handler);
        CHECK(outcome_of([&] { return throwing(form); }) == BAD_ALLOC);
        CHECK(handler_calls == 1);
        CHECK(nothrow(form) == nullptr);
        CHECK(handler_calls == 2);

        /* A handler that throws something else: it reaches the caller of
         * the throwing forms; the nothrow forms still return null. */
        handler_calls = 0;
        std::set_new_handler(int_handler);
        CHECK(outcome_of([&] { return throwing(form); }) == INT);
        CHECK(nothrow(form) == nullptr);
        CHECK(handler_calls == 2);
        std::set_new_handler(nullptr);
    }
    /* An alignment that is not a power of two: bad_alloc without calling
     * the handler (as libstdc++), null from nothrow. */
    handler_calls = 0;
    handler_limit = 100;
    std::set_new_handler(counting_handler);
    CHECK(outcome_of([] { return ::operator new(64, std::align_val_t{48}); }) == BAD_ALLOC);
    CHECK(::operator new(64, std::align_val_t{48}, std::nothrow) == nullptr);
    CHECK(handler_calls == 0);
    std::set_new_handler(nullptr);
    /* Memory is fine afterwards. */
    void *p = ::operator new(100);
    check_block(p, 100, 16);
    ::operator delete(p, 100);
}

/* RLIMIT_AS exhausted with new[] (a real out-of-memory, not an impossible
 * size): the handler frees half of what was allocated and uninstalls
 * itself, the new that called it then succeeds; afterwards new throws. */
struct Chunk {
    Chunk *next;
    char bytes[(1 << 20) - sizeof(Chunk *)];
};
static Chunk *chain;
static void freeing_handler() {
    ++handler_calls;
    for (int i = 0; i < 64 && chain != nullptr; i++) {
        Chunk *next = chain->next;
        delete chain;
        chain = next;
    }
    std::set_new_handler(nullptr);
}

static int handler_frees() {
    struct rlimit limit = {512u << 20, 512u << 20};
    if (setrlimit(RLIMIT_AS, &limit) != 0) {
        std::perror("setrlimit");
        return 2;
    }
    std::set_new_handler(freeing_handler);
    std::size_t count = 0;
    while (handler_calls == 0) {
        Chunk *c = new Chunk; /* the one that calls the handler succeeds */
        c->next = chain;
        chain = c;
        count++;
    }
    CHECK(handler_calls == 1);
    CHECK(count > 64);
    bool threw = false;
    try {
        for (;;) {
            Chunk *c = new Chunk;
            c->next = chain;
            chain = c;
        }
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw);
    CHECK(handler_calls == 1);
    while (chain != nullptr) {
        Chunk *next = chain->next;
        delete chain;
        chain = next;
    }
    std::printf("handler-frees: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}

/* ---- containers and threads ---- */

static std::uint64_t workload(unsigned seed, int rounds) {
    std::uint64_t digest = seed;
    unsigned state = seed * 2654435761u + 1;
    auto next = [&] { return state = state * 1103515245u + 12345u; };
    for (int round = 0; round < rounds; round++) {
        std::vector<std::string> words;
        for (int i = 0; i < 2000; i++) {
            words.emplace_back(next() % 200, static_cast<char>('a' + next() % 26));
        }
        std::sort(words.begin(), words.end());
        std::map<unsigned, std::string> ordered;
        std::unordered_map<std::string, unsigned> counts;
        for (const auto &w : words) {
            ordered[next() % 5000] = w;
            counts[w.substr(0, 3)]++;
        }
        for (auto it = ordered.begin(); it != ordered.end();) {
            it = (it->first % 3 == 0) ? ordered.erase(it) : std::next(it);
        }
        std::deque<std::vector<int>> queue;
        for (int i = 0; i < 500; i++) queue.emplace_back(next() % 300, i);
        for (const auto &v : queue) digest = digest * 31 + v.size();
        for (const auto &kv : ordered) digest = digest * 31 + kv.first + kv.second.size();
        digest = digest * 31 + counts.size();
    }
    return digest;
}

/* Producers allocate objects with new, consumers delete them (cross-thread
 * sized deletes of hakmem blocks). */
static void test_threads() {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::unique_ptr<Base>> queue;
    std::atomic<int> producing{4};
    std::atomic<long> consumed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 20000; i++) {
                std::unique_ptr<Base> o;
                switch ((i + t) % 3) {
                case 0: o.reset(new Derived<16>); break;
                case 1: o.reset(new Derived<700>); break;
                default: o.reset(new Derived<9000>); break;
                }
                std::lock_guard<std::mutex> lock(mutex);
                queue.push_back(std::move(o));
                ready.notify_one();
            }
            producing--;
            ready.notify_all();
        });
    }
    for (int t = 0; t < 3; t++) {
        threads.emplace_back([&] {
            for (;;) {
                std::unique_ptr<Base> o;
                {
                    std::unique_lock<std::mutex> lock(mutex);
                    ready.wait(lock, [&] { return !queue.empty() || producing == 0; });
                    if (queue.empty()) return;
                    o = std::move(queue.front());
                    queue.pop_front();
                }
                if (!owns(o.get())) std::abort();
                consumed++;
            }
        });
    }
    std::vector<std::uint64_t> digests(4);
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&digests, t] { digests[t] = workload(static_cast<unsigned>(t), 3); });
    }
    for (auto &th : threads) th.join();
    CHECK(consumed == 4 * 20000);
    for (int t = 0; t < 4; t++) CHECK(digests[t] == workload(static_cast<unsigned>(t), 3));
}

/* ---- glibc's statistics, answered by hakmem ---- */

static void test_statistics() {
    const std::size_t big = (std::size_t)10 << 20;
    char *block = new char[big];
    std::memset(block, 1, big);
    CHECK(owns(block));

    struct mallinfo2 info = mallinfo2();
    CHECK(info.uordblks >= big);
    CHECK(info.arena >= big);
    CHECK(info.hblks >= 1);
    struct mallinfo legacy = mallinfo();
    CHECK(static_cast<std::size_t>(legacy.uordblks) >= big);

    char *xml = nullptr;
    std::size_t len = 0;
    FILE *stream = open_memstream(&xml, &len);
    CHECK(stream != nullptr);
    CHECK(malloc_info(0, stream) == 0);
    CHECK(malloc_info(1, stream) == EINVAL);
    std::fclose(stream);
    CHECK(xml != nullptr && std::strncmp(xml, "<malloc version=\"1\">\n", 21) == 0);
    CHECK(std::strstr(xml, "</malloc>\n") != nullptr);
    const char *json = xml ? std::strstr(xml, "\"committed_bytes\":") : nullptr;
    CHECK(json != nullptr);
    if (json != nullptr) {
        CHECK(std::strtoull(json + std::strlen("\"committed_bytes\":"), nullptr, 10) >= big);
    }
    const char *current = xml ? std::strstr(xml, "<system type=\"current\" size=\"") : nullptr;
    CHECK(current != nullptr);
    if (current != nullptr) {
        CHECK(std::strtoull(current + std::strlen("<system type=\"current\" size=\""), nullptr, 10) >= big);
    }
    std::free(xml);

    /* The report goes to stderr; the test checks it. */
    malloc_stats();
    delete[] block;
}

/* ---- misuse: one bad delete, expected to abort ---- */

static int misuse(const char *kind) {
    char stack_buffer[64];
    void *volatile p = nullptr;
    std::fflush(stdout);
    if (std::strcmp(kind, "aligned") == 0 || std::strcmp(kind, "aligned-sized") == 0) {
        /* Two 64-aligned blocks: at most one is also 1 MiB-aligned. */
        void *q = ::operator new(100, std::align_val_t{64});
        p = ::operator new(100, std::align_val_t{64});
        if (aligned(p, (std::size_t)1 << 20)) p = q;
        if (kind[7] == '\0') {
            ::operator delete(p, std::align_val_t{(std::size_t)1 << 20});
        } else {
            ::operator delete[](p, 100, std::align_val_t{(std::size_t)1 << 20});
        }
    } else if (std::strcmp(kind, "sized-stack") == 0) {
        p = stack_buffer + 16;
        ::operator delete(p, 16);
    } else if (std::strcmp(kind, "sized-freed") == 0) {
        void *keep = ::operator new(100);
        escape(keep);
        p = ::operator new(100);
        ::operator delete(p, 100);
        ::operator delete(p, 100);
    } else if (std::strcmp(kind, "unsized-stack") == 0) {
        p = stack_buffer + 16;
        ::operator delete(p);
    } else {
        return 2;
    }
    std::printf("returned\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && std::strcmp(argv[1], "handler-frees") == 0) return handler_frees();
    if (argc == 3 && std::strcmp(argv[1], "misuse") == 0) return misuse(argv[2]);
    if (argc != 1) {
        std::fprintf(stderr, "usage: %s [handler-frees | misuse <kind>]\n", argv[0]);
        return 2;
    }
    test_every_form();
    test_expressions();
    test_new_handler();
    test_threads();
    test_statistics();
    std::printf("operators: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
