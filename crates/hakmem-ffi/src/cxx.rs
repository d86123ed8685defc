//! C++'s replaceable allocation functions ([new.delete]): every form of
//! `operator new` and `operator delete` (plain and array; nothrow, sized,
//! `std::align_val_t` and their combinations), exported under their
//! Itanium-mangled names so that a C++ program that preloads or links
//! libhakmem allocates from hakmem directly instead of through libstdc++'s
//! wrappers around `malloc`.
//!
//! - **new** allocates with `hakmem_core::alloc`, the aligned forms with
//!   the alignment given (hakmem's aligned classes, no over-allocation).
//!   When that fails, [new.delete.single]'s loop runs: call the new-handler
//!   while one is installed and try again; without one, throw
//!   `std::bad_alloc` (the nothrow forms: return null). Calling the handler
//!   and throwing are C++, in `src/new_handler.cpp` (see there, and
//!   docs/DESIGN.md "C++ operators", for how libhakmem does this without
//!   depending on libstdc++). An exception must not unwind through a Rust
//!   frame (with `panic = "abort"` that aborts), so the throwing forms are
//!   naked functions: they call the Rust allocation and, on failure, *jump*
//!   to the C++ loop, leaving no frame of their own on the stack. The
//!   nothrow forms are Rust: the C++ they call never unwinds.
//! - **delete** is `free`, with free's pointer checks and diagnostics
//!   (`hakmem: free(): ...`; `overrides.rs`). The sized forms ignore the
//!   size: hakmem finds a block's size from its address, and checking the
//!   size would cost more than half of the checked `free` again (see
//!   `overrides.rs`). The aligned forms check that the pointer has the
//!   alignment (one test; a mismatch is reported as `hakmem: operator
//!   delete(): pointer not aligned to ...` and aborts, or is ignored under
//!   `HAKMEM_ON_ERROR=warn`).
//!
//! Each default form of the standard is implemented directly, not by
//! calling another operator: a program that replaces only some of them
//! (say, unsized `operator delete` with a pool of its own) and preloads
//! hakmem gets hakmem's for the rest, as with other preloadable
//! allocators.

use crate::overrides::misaligned_free;
use core::arch::naked_asm;
use core::ffi::c_void;
use hakmem_core::MIN_ALIGN;

/// What `src/new_handler.cpp` may call back (`struct HakmemCxxHooks`): the
/// C++ side gets it as an argument rather than through an exported symbol,
/// which would join the library's API.
#[repr(C)]
struct CxxHooks {
    /// hakmem's allocation: the block, or null.
    alloc: extern "C" fn(usize, usize) -> *mut c_void,
    /// Called when `new` must throw and no C++ runtime can be found.
    no_runtime: extern "C" fn(usize, usize) -> !,
}

static HOOKS: CxxHooks = CxxHooks {
    alloc: alloc_aligned,
    no_runtime,
};

extern "C-unwind" {
    /// The throwing forms' loop once hakmem is out of memory: returns a
    /// block or throws (`std::bad_alloc`, or whatever the new-handler
    /// throws). Only ever jumped to from the naked entry points below.
    fn hakmem_cxx_new_failed(size: usize, align: usize, hooks: *const CxxHooks) -> *mut c_void;
}

extern "C" {
    /// The nothrow forms' loop: a block or null; never unwinds (`noexcept`
    /// in C++).
    fn hakmem_cxx_nothrow_failed(size: usize, align: usize, hooks: *const CxxHooks) -> *mut c_void;
}

/// `malloc`'s allocation, for the plain throwing forms.
extern "C" fn alloc_default(size: usize) -> *mut c_void {
    hakmem_core::malloc(size).cast()
}

/// `size` bytes aligned to `align`; null when `align` is not a power of
/// two (`std::align_val_t` should be; the C++ loop then throws at once).
extern "C" fn alloc_aligned(size: usize, align: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        return core::ptr::null_mut();
    }
    hakmem_core::alloc(size, align).cast()
}

/// `new` cannot throw: no C++ runtime is linked or loaded (a C program
/// calling `_Znwm` itself, or a static program that never linked
/// `std::__throw_bad_alloc`). Reported and fatal, never a null return.
extern "C" fn no_runtime(size: usize, align: usize) -> ! {
    let mut line = hakmem_core::Line::new();
    line.push(b"hakmem: operator new(): out of memory for ");
    line.push_usize(size);
    line.push(b" bytes (alignment ");
    line.push_usize(align);
    line.push(b") and no C++ runtime to throw std::bad_alloc\n");
    line.write();
    // SAFETY: abort takes no arguments and does not return.
    unsafe { libc::abort() }
}

/// The nothrow forms: `size` bytes aligned to `align`, or null after the
/// new-handler loop. Every exported form calls this (or [`delete`] and its
/// kin) rather than another exported form: LLVM knows the mangled names as
/// C++'s allocation functions and may elide a call to one whose result is
/// only compared with null.
#[inline(always)]
fn new_nothrow(size: usize, align: usize) -> *mut c_void {
    let p = alloc_aligned(size, align);
    if p.is_null() {
        return nothrow_failed(size, align);
    }
    p
}

/// The nothrow forms after a failed allocation.
#[cold]
#[inline(never)]
fn nothrow_failed(size: usize, align: usize) -> *mut c_void {
    // SAFETY: the C++ function takes any size and alignment, reads HOOKS
    // only, and never unwinds.
    unsafe { hakmem_cxx_nothrow_failed(size, align, &HOOKS) }
}

/// Defines a throwing, unaligned form of `operator new` (`operator
/// new(std::size_t)`, `operator new[](std::size_t)`): `alloc_default`, and
/// on failure a tail jump to the C++ loop with the size, `MIN_ALIGN` and
/// the hooks. Fast path: push, call, pop, test, branch, return.
macro_rules! throwing_new {
    ($(#[$doc:meta])* $name:ident = $symbol:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// No precondition; the block must be released with the matching
        /// `operator delete` (or `free`), once.
        #[unsafe(naked)]
        #[export_name = $symbol]
        pub unsafe extern "C" fn $name(size: usize) -> *mut c_void {
            naked_asm!(
                ".cfi_startproc",
                // The size, kept for the failure path; also aligns the
                // stack to 16 bytes for the call.
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                "call {alloc}",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "test rax, rax",
                "jz 2f",
                "ret",
                "2:",
                "mov esi, {min_align}",
                "lea rdx, [rip + {hooks}]",
                "jmp {failed}",
                ".cfi_endproc",
                alloc = sym alloc_default,
                min_align = const MIN_ALIGN,
                hooks = sym HOOKS,
                failed = sym hakmem_cxx_new_failed,
            )
        }
    };
}

/// Defines a throwing, aligned form (`operator new(std::size_t,
/// std::align_val_t)` and the array one): as [`throwing_new`], with the
/// alignment kept as well.
macro_rules! throwing_new_aligned {
    ($(#[$doc:meta])* $name:ident = $symbol:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// No precondition; the block must be released with the matching
        /// `operator delete` (or `free`), once.
        #[unsafe(naked)]
        #[export_name = $symbol]
        pub unsafe extern "C" fn $name(size: usize, align: usize) -> *mut c_void {
            naked_asm!(
                ".cfi_startproc",
                "push rsi",
                ".cfi_adjust_cfa_offset 8",
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                // Two pushes leave the stack 8 bytes off 16 for the call.
                "sub rsp, 8",
                ".cfi_adjust_cfa_offset 8",
                "call {alloc}",
                "add rsp, 8",
                ".cfi_adjust_cfa_offset -8",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "pop rsi",
                ".cfi_adjust_cfa_offset -8",
                "test rax, rax",
                "jz 2f",
                "ret",
                "2:",
                "lea rdx, [rip + {hooks}]",
                "jmp {failed}",
                ".cfi_endproc",
                alloc = sym alloc_aligned,
                hooks = sym HOOKS,
                failed = sym hakmem_cxx_new_failed,
            )
        }
    };
}

throwing_new! {
    /// `operator new(std::size_t)`: `size` bytes aligned to 16
    /// (`__STDCPP_DEFAULT_NEW_ALIGNMENT__`); a unique block for 0. On
    /// failure, calls the new-handler until it is null, then throws
    /// `std::bad_alloc`.
    operator_new = "_Znwm"
}

throwing_new! {
    /// `operator new[](std::size_t)`: as [`operator_new`].
    operator_new_array = "_Znam"
}

throwing_new_aligned! {
    /// `operator new(std::size_t, std::align_val_t)`: `size` bytes aligned
    /// to `align` (a power of two; otherwise `std::bad_alloc` at once, as
    /// libstdc++ does). Failure as [`operator_new`].
    operator_new_aligned = "_ZnwmSt11align_val_t"
}

throwing_new_aligned! {
    /// `operator new[](std::size_t, std::align_val_t)`: as
    /// [`operator_new_aligned`].
    operator_new_array_aligned = "_ZnamSt11align_val_t"
}

/// `operator new(std::size_t, const std::nothrow_t &)`: as
/// [`operator_new`], returning null where that throws (also when the
/// new-handler throws).
///
/// # Safety
/// As [`operator_new`].
#[export_name = "_ZnwmRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_new_nothrow(size: usize, _nothrow: *const c_void) -> *mut c_void {
    new_nothrow(size, MIN_ALIGN)
}

/// `operator new[](std::size_t, const std::nothrow_t &)`.
///
/// # Safety
/// As [`operator_new`].
#[export_name = "_ZnamRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_new_array_nothrow(size: usize, _nothrow: *const c_void) -> *mut c_void {
    new_nothrow(size, MIN_ALIGN)
}

/// `operator new(std::size_t, std::align_val_t, const std::nothrow_t &)`.
///
/// # Safety
/// As [`operator_new`].
#[export_name = "_ZnwmSt11align_val_tRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_new_aligned_nothrow(
    size: usize,
    align: usize,
    _nothrow: *const c_void,
) -> *mut c_void {
    new_nothrow(size, align)
}

/// `operator new[](std::size_t, std::align_val_t, const std::nothrow_t &)`.
///
/// # Safety
/// As [`operator_new`].
#[export_name = "_ZnamSt11align_val_tRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_new_array_aligned_nothrow(
    size: usize,
    align: usize,
    _nothrow: *const c_void,
) -> *mut c_void {
    new_nothrow(size, align)
}

/// Frees `p` (any value) as `free` does, with free's checks (a bad pointer
/// is reported as `hakmem: free(): ...`).
///
/// # Safety
/// `p` must not be used after the call.
#[inline(always)]
unsafe fn delete(p: *mut c_void) {
    // SAFETY: free_checked accepts any pointer.
    unsafe { hakmem_core::free_checked(p.cast()) }
}

/// `operator delete(void *)`: `free`, with its pointer checks.
///
/// # Safety
/// `p` must be null or a block from this library not used after.
#[export_name = "_ZdlPv"]
pub unsafe extern "C" fn operator_delete(p: *mut c_void) {
    // SAFETY: the caller does not use p after.
    unsafe { delete(p) }
}

/// `operator delete[](void *)`.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdaPv"]
pub unsafe extern "C" fn operator_delete_array(p: *mut c_void) {
    // SAFETY: the caller does not use p after.
    unsafe { delete(p) }
}

/// `operator delete(void *, const std::nothrow_t &)` (called when a
/// constructor throws after a nothrow new).
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdlPvRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_delete_nothrow(p: *mut c_void, _nothrow: *const c_void) {
    // SAFETY: the caller does not use p after.
    unsafe { delete(p) }
}

/// `operator delete[](void *, const std::nothrow_t &)`.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdaPvRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_delete_array_nothrow(p: *mut c_void, _nothrow: *const c_void) {
    // SAFETY: the caller does not use p after.
    unsafe { delete(p) }
}

/// `operator delete(void *, std::size_t)`: [`operator_delete`]; the size is
/// not needed and not checked.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdlPvm"]
pub unsafe extern "C" fn operator_delete_sized(p: *mut c_void, _size: usize) {
    // SAFETY: the caller does not use p after.
    unsafe { delete(p) }
}

/// `operator delete[](void *, std::size_t)`: as [`operator_delete_sized`].
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdaPvm"]
pub unsafe extern "C" fn operator_delete_array_sized(p: *mut c_void, _size: usize) {
    // SAFETY: the caller does not use p after.
    unsafe { delete(p) }
}

/// Frees `p` from an aligned new: `p` must have the alignment (one test
/// before `free`'s checks; an alignment that is not a power of two cannot
/// have come from `new`), see [`misaligned_free`].
///
/// # Safety
/// As [`operator_delete`].
#[inline(always)]
unsafe fn delete_aligned(function: &str, p: *mut c_void, align: usize) {
    if align.is_power_of_two() && (p as usize) & (align - 1) == 0 {
        // SAFETY: the caller does not use p after.
        return unsafe { delete(p) };
    }
    misaligned_free(function, p, align)
}

/// `operator delete(void *, std::align_val_t)`.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdlPvSt11align_val_t"]
pub unsafe extern "C" fn operator_delete_aligned(p: *mut c_void, align: usize) {
    // SAFETY: the caller's guarantee is delete_aligned's.
    unsafe { delete_aligned("operator delete", p, align) }
}

/// `operator delete[](void *, std::align_val_t)`.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdaPvSt11align_val_t"]
pub unsafe extern "C" fn operator_delete_array_aligned(p: *mut c_void, align: usize) {
    // SAFETY: the caller's guarantee is delete_aligned's.
    unsafe { delete_aligned("operator delete[]", p, align) }
}

/// `operator delete(void *, std::align_val_t, const std::nothrow_t &)`.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdlPvSt11align_val_tRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_delete_aligned_nothrow(p: *mut c_void, align: usize, _nothrow: *const c_void) {
    // SAFETY: the caller's guarantee is delete_aligned's.
    unsafe { delete_aligned("operator delete", p, align) }
}

/// `operator delete[](void *, std::align_val_t, const std::nothrow_t &)`.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdaPvSt11align_val_tRKSt9nothrow_t"]
pub unsafe extern "C" fn operator_delete_array_aligned_nothrow(p: *mut c_void, align: usize, _nothrow: *const c_void) {
    // SAFETY: the caller's guarantee is delete_aligned's.
    unsafe { delete_aligned("operator delete[]", p, align) }
}

/// `operator delete(void *, std::size_t, std::align_val_t)`: as
/// [`operator_delete_aligned`]; the size is not checked.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdlPvmSt11align_val_t"]
pub unsafe extern "C" fn operator_delete_sized_aligned(p: *mut c_void, _size: usize, align: usize) {
    // SAFETY: the caller's guarantee is delete_aligned's.
    unsafe { delete_aligned("operator delete", p, align) }
}

/// `operator delete[](void *, std::size_t, std::align_val_t)`.
///
/// # Safety
/// As [`operator_delete`].
#[export_name = "_ZdaPvmSt11align_val_t"]
pub unsafe extern "C" fn operator_delete_array_sized_aligned(p: *mut c_void, _size: usize, align: usize) {
    // SAFETY: the caller's guarantee is delete_aligned's.
    unsafe { delete_aligned("operator delete[]", p, align) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hint::black_box;

    #[test]
    fn aligned_allocation_refuses_alignments_that_are_not_powers_of_two() {
        assert!(alloc_aligned(64, 48).is_null());
        assert!(alloc_aligned(64, 0).is_null());
        let p = alloc_aligned(100, 4096);
        assert!(!p.is_null() && (p as usize).is_multiple_of(4096));
        // SAFETY: p is a live block of at least 100 bytes aligned to 4096.
        unsafe { operator_delete_sized_aligned(p, 100, 4096) };
    }

    #[test]
    fn nothrow_new_without_a_handler_returns_null() {
        // The test harness has no C++ runtime: no new-handler can be set,
        // so the C++ loop returns null at once. black_box: LLVM knows these
        // names as C++ allocation functions and would fold a discarded
        // result's null test.
        let new: unsafe extern "C" fn(usize, *const c_void) -> *mut c_void = black_box(operator_new_nothrow);
        let new_aligned: unsafe extern "C" fn(usize, usize, *const c_void) -> *mut c_void =
            black_box(operator_new_aligned_nothrow);
        // SAFETY: the nothrow argument is not read.
        unsafe {
            assert!(black_box(new(usize::MAX, core::ptr::null())).is_null());
            assert!(black_box(new_aligned(usize::MAX / 2, 64, core::ptr::null())).is_null());
            assert!(black_box(new_aligned(64, 3, core::ptr::null())).is_null());
        }
    }

    #[test]
    fn every_form_allocates_from_hakmem() {
        // SAFETY: blocks are freed once with a matching form; the throwing
        // forms succeed for these sizes (no exception can arise).
        unsafe {
            for size in [0, 1, 100, 5000, 100_000, 3 << 20] {
                let p = black_box(operator_new(size));
                assert!(hakmem_core::is_hakmem_segment(p.cast()));
                operator_delete_sized(p, size);
                let p = black_box(operator_new_array(size));
                assert!(hakmem_core::is_hakmem_segment(p.cast()));
                operator_delete_array(p);
                for align in [8, 16, 64, 4096, 1 << 16, 1 << 21] {
                    let p = black_box(operator_new_aligned(size, align));
                    assert!((p as usize).is_multiple_of(align), "{size} {align}");
                    operator_delete_aligned(p, align);
                    let p = black_box(operator_new_array_aligned(size, align));
                    assert!((p as usize).is_multiple_of(align), "{size} {align}");
                    operator_delete_array_sized_aligned(p, size, align);
                }
            }
        }
    }
}
