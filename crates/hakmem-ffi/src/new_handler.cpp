// The part of hakmem's C++ `operator new` that must be C++: calling the
// new-handler, throwing `std::bad_alloc`, and (for the nothrow forms)
// catching what a new-handler throws. `src/cxx.rs` holds the operators
// themselves; it comes here only when an allocation has failed.
//
// libhakmem must not need the C++ runtime: a C program that preloads or
// links it must not get libstdc++ as a dependency (`readelf -d` shows no
// libstdc++; tests/cpp_api.rs checks). So every reference from this file to
// the C++ runtime is a *weak* undefined symbol:
//
// - in a C++ program (libstdc++ loaded with the program, or linked into a
//   static one) the weak references resolve, and everything below works as
//   in libstdc++'s own `operator new`;
// - when the runtime was loaded later with `dlopen` (a C program loading a
//   C++ plugin: python and its C++ extension modules), the weak references
//   stayed null at start-up; the runtime functions are then looked up by
//   name, in the global scope (`RTLD_DEFAULT`) and in an already loaded
//   libstdc++.so.6 (`RTLD_NOLOAD`: never loads anything). The personality
//   routine cannot be looked up that way, so in that case the nothrow forms
//   cannot catch what a new-handler throws: they return null without calling
//   the handler;
// - with no C++ runtime at all, a throwing `new` cannot throw: hakmem
//   reports `hakmem: operator new(): ...` and aborts (`no_runtime`).
//
// Nothing here may call anything that could fail for lack of the runtime
// without checking the weak address first. Compiled by build.rs with
// -fvisibility=hidden: these functions are hakmem's own, never exported.

#include <cstddef>
#include <dlfcn.h>
#include <new>

// What src/cxx.rs gives: hakmem's allocation, and how to give up.
struct HakmemCxxHooks {
    // hakmem_core::alloc(size, align): the block, or null.
    void *(*alloc)(std::size_t size, std::size_t align) noexcept;
    // Reports that `new` cannot throw std::bad_alloc (no C++ runtime) and
    // aborts; never returns.
    void (*no_runtime)(std::size_t size, std::size_t align) noexcept;
};

// The C++ runtime, when the program has one: weak, null otherwise.
extern "C" {
std::new_handler hakmem_linked_get_new_handler() noexcept __asm__("_ZSt15get_new_handlerv")
    __attribute__((weak));
[[noreturn]] void hakmem_linked_throw_bad_alloc() __asm__("_ZSt17__throw_bad_allocv") __attribute__((weak));
// What a catch clause calls (the compiler emits these calls); checked
// before any catch can be reached.
void *__cxa_begin_catch(void *exception) noexcept __attribute__((weak));
void __cxa_end_catch() __attribute__((weak));
int __gxx_personality_v0(...) __attribute__((weak));
}

// dlsym is in libc.so.6 (glibc >= 2.34); weak, so that a static program
// does not depend on it. dlopen and dlclose are looked up with dlsym: a
// reference to dlopen, even a weak one, makes the static linker pull it in
// and warn ("Using 'dlopen' in statically linked applications ...") in
// every static program linking libhakmem.a.
#pragma weak dlsym

namespace {

using GetNewHandler = std::new_handler (*)() noexcept;
using ThrowBadAlloc = void (*)();
using Dlopen = void *(*)(const char *file, int mode) noexcept;
using Dlclose = int (*)(void *handle) noexcept;

bool is_power_of_two(std::size_t align) noexcept {
    return align != 0 && (align & (align - 1)) == 0;
}

// A C++ runtime function: the linked one, else the one named `name` in a
// runtime loaded after start-up, else null.
void *runtime_function(void *linked, const char *name) noexcept {
    if (linked != nullptr) {
        return linked;
    }
    if (&dlsym == nullptr) {
        return nullptr;
    }
    if (void *found = dlsym(RTLD_DEFAULT, name)) {
        return found;
    }
    // A runtime loaded with RTLD_LOCAL as the dependency of a plugin.
    auto open = reinterpret_cast<Dlopen>(dlsym(RTLD_DEFAULT, "dlopen"));
    auto close = reinterpret_cast<Dlclose>(dlsym(RTLD_DEFAULT, "dlclose"));
    if (open == nullptr || close == nullptr) {
        return nullptr;
    }
    void *runtime = open("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (runtime == nullptr) {
        return nullptr;
    }
    void *found = dlsym(runtime, name);
    // Drops only the reference RTLD_NOLOAD took; the library stays loaded
    // by whoever loaded it, so `found` stays valid.
    close(runtime);
    return found;
}

// std::get_new_handler(), or null when there is no runtime (then nobody
// can have installed a handler).
std::new_handler current_new_handler() noexcept {
    auto get = reinterpret_cast<GetNewHandler>(
        runtime_function(reinterpret_cast<void *>(&hakmem_linked_get_new_handler), "_ZSt15get_new_handlerv"));
    return get != nullptr ? get() : nullptr;
}

[[noreturn]] void throw_bad_alloc(std::size_t size, std::size_t align, const HakmemCxxHooks *hooks) {
    auto throw_it = reinterpret_cast<ThrowBadAlloc>(
        runtime_function(reinterpret_cast<void *>(&hakmem_linked_throw_bad_alloc), "_ZSt17__throw_bad_allocv"));
    if (throw_it != nullptr) {
        throw_it();
    }
    hooks->no_runtime(size, align);
    __builtin_trap();
}

// Whether a catch clause in this file works: the personality routine and
// the catch functions resolved (they come together with the runtime).
bool can_catch() noexcept {
    return &__gxx_personality_v0 != nullptr && &__cxa_begin_catch != nullptr && &__cxa_end_catch != nullptr;
}

} // namespace

// The throwing forms of operator new after hakmem_core::alloc(size, align)
// returned null ([new.delete.single]): while a new-handler is installed,
// call it and try again; without one, throw std::bad_alloc. An alignment
// that is not a power of two throws at once, without the handler, as
// libstdc++ does. src/cxx.rs jumps here (a tail jump, so no Rust frame is
// between the caller and an exception thrown here or by the handler).
extern "C" void *hakmem_cxx_new_failed(std::size_t size, std::size_t align, const HakmemCxxHooks *hooks) {
    if (!is_power_of_two(align)) {
        throw_bad_alloc(size, align, hooks);
    }
    for (;;) {
        std::new_handler handler = current_new_handler();
        if (handler == nullptr) {
            throw_bad_alloc(size, align, hooks);
        }
        handler();
        if (void *p = hooks->alloc(size, align)) {
            return p;
        }
    }
}

// The nothrow forms after hakmem_core::alloc returned null: the loop above,
// with null instead of std::bad_alloc and whatever the handler throws
// caught (libstdc++'s nothrow new catches everything from its throwing
// one). Never unwinds. When the catch cannot work (see the top of the
// file), the handler is not called.
extern "C" void *hakmem_cxx_nothrow_failed(std::size_t size, std::size_t align, const HakmemCxxHooks *hooks) noexcept {
    if (!is_power_of_two(align)) {
        return nullptr;
    }
    for (;;) {
        std::new_handler handler = current_new_handler();
        if (handler == nullptr || !can_catch()) {
            return nullptr;
        }
        try {
            handler();
        } catch (...) {
            return nullptr;
        }
        if (void *p = hooks->alloc(size, align)) {
            return p;
        }
    }
}
