//! glibc's allocator API, exported under glibc's names so that hakmem
//! replaces the system allocator (`LD_PRELOAD=libhakmem.so`, or
//! `libhakmem.a` linked into a program).
//!
//! Semantics are glibc 2.36's, edge cases included; each function's doc
//! says which rule it follows and `tests/c/edge_cases.c` checks them:
//!
//! - Failure is `NULL` + `errno = ENOMEM` (never an abort), including
//!   `calloc`/`reallocarray` overflow and sizes above `PTRDIFF_MAX`;
//!   `posix_memalign` returns the error instead and leaves `*memptr` alone.
//! - A successful call leaves `errno` as it was.
//! - `free`, `realloc` and `malloc_usable_size` first check that the
//!   pointer is a live hakmem block (`hakmem_core::check_block`: segment
//!   map, block start, freed mark; O(1), no system call); a foreign,
//!   interior or already freed pointer is reported (`hakmem: free():
//!   invalid pointer ...`) and the process aborts, as glibc does for the
//!   pointers it recognises as bad (`HAKMEM_ON_ERROR=warn`: the call is
//!   ignored instead).
//! - C23's `free_sized` and `free_aligned_sized` (and C++'s sized and
//!   aligned `operator delete`, `src/cxx.rs`) are `free`, with free's
//!   checks and diagnostics. hakmem finds a block's size from its address
//!   (a mask and a shift), so the size given does not help, and checking it
//!   is not free: the public API of hakmem-core needs a second segment-map
//!   lookup and page load for it, 18 instructions on top of the checked
//!   `free`'s 31 (callgrind, a C++ new/sized-delete loop: 103 instructions
//!   per pair against 79). The size is therefore accepted and not checked.
//!   The alignment of the aligned forms is: one test, and a pointer without
//!   it is reported (`hakmem: free_aligned_sized(): pointer not aligned to
//!   ...`) like a bad pointer.
//!
//! Everything else (size classes, zeroing, in-place `realloc`) is
//! hakmem-core's; these functions only check arguments and translate.
//!
//! The module is kept out of `include/hakmem.h` (`cbindgen:ignore` on its
//! declaration): the system headers already declare these functions.

use core::ffi::{c_int, c_void};
use core::ptr;
use hakmem_core::Line;
use hakmem_core::MIN_ALIGN;

/// The OS page size on x86-64 Linux: what `valloc` and `pvalloc` align to.
/// (Not `hakmem_core::PAGE_SIZE`, which is hakmem's 64 KiB page.)
const OS_PAGE_SIZE: usize = 4096;

/// `posix_memalign`'s rule: a power of two and a multiple of `sizeof(void *)`.
fn is_posix_alignment(align: usize) -> bool {
    align.is_power_of_two() && align.is_multiple_of(core::mem::size_of::<*mut c_void>())
}

/// glibc's `memalign` (and, in 2.36, `aligned_alloc`) rule: an alignment up
/// to `malloc`'s own is `malloc`'s; any other is rounded up to a power of
/// two; one with no power of two above it (> `SIZE_MAX / 2 + 1`) is
/// `EINVAL` (`None`).
fn memalign_alignment(align: usize) -> Option<usize> {
    if align <= MIN_ALIGN {
        Some(MIN_ALIGN)
    } else {
        align.checked_next_power_of_two()
    }
}

/// `pvalloc`'s size: `size` rounded up to whole OS pages (`None` when that
/// overflows).
fn pvalloc_size(size: usize) -> Option<usize> {
    Some(size.checked_add(OS_PAGE_SIZE - 1)? & !(OS_PAGE_SIZE - 1))
}

pub(crate) fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = value }
}

/// `NULL` with `errno = ENOMEM`.
#[cold]
pub(crate) fn enomem() -> *mut c_void {
    set_errno(libc::ENOMEM);
    ptr::null_mut()
}

/// Whether `p` (non-null) is a live hakmem block, checked before
/// `function` (the C function called) uses it: in a hakmem segment (O(1)
/// segment map), at the start of a block, not already freed. A bad pointer
/// is reported (`hakmem: <function>(): <reason> 0x...`) and the process
/// aborts, or, under `HAKMEM_ON_ERROR=warn`, this returns false and the
/// caller ignores the call.
#[inline(always)]
pub(crate) fn is_live_block(function: &str, p: *mut c_void) -> bool {
    // SAFETY: p is non-null (every caller checks); check_block accepts any
    // other value and reads only hakmem segment headers and blocks.
    unsafe { hakmem_core::check_block(p.cast(), function) }
}

/// Allocates `size` bytes aligned to 16 (`max_align_t`). `malloc(0)`
/// returns a unique block; failure is `NULL` with `errno = ENOMEM`.
///
/// # Safety
/// No precondition; the block must be released only through this library
/// (`free`, `realloc`), once.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    hakmem_core::malloc(size).cast()
}

/// Frees block `p`; `free(NULL)` does nothing. A pointer hakmem did not
/// hand out (outside its segments, inside a block, or already freed) is
/// reported on stderr and the process aborts (see [`is_live_block`]).
///
/// # Safety
/// `p` must be `NULL` or a block from this library that is not used after.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: free_checked accepts any value: NULL does nothing, anything
    // that is not a live hakmem block is reported.
    unsafe { hakmem_core::free_checked(p.cast()) }
}

/// `count * size` zeroed bytes; `NULL` with `errno = ENOMEM` when the
/// product overflows or cannot be had.
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        Some(total) => hakmem_core::alloc_zeroed(total, MIN_ALIGN).cast(),
        None => enomem(),
    }
}

/// Resizes `p` to `size` bytes, keeping its contents up to the smaller
/// size. glibc's rules: `realloc(NULL, n)` is `malloc(n)`; `realloc(p, 0)`
/// frees `p` and returns `NULL` (errno untouched); on failure it returns
/// `NULL` with `errno = ENOMEM` and `p` stays valid.
///
/// # Safety
/// `p` must be `NULL` or a live block from this library; on success it
/// must no longer be used.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return hakmem_core::malloc(size).cast();
    }
    if !is_live_block("realloc", p) {
        // HAKMEM_ON_ERROR=warn: the call is ignored, as a failure.
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    if size == 0 {
        // SAFETY: p is a live hakmem block (checked above).
        unsafe { hakmem_core::free(p.cast()) };
        return ptr::null_mut();
    }
    // SAFETY: p is a live hakmem block (checked above); malloc's blocks
    // have MIN_ALIGN, and realloc promises no more.
    unsafe { hakmem_core::realloc(p.cast(), size, MIN_ALIGN).cast() }
}

/// `realloc(p, count * size)`, except that an overflowing product returns
/// `NULL` with `errno = ENOMEM` and leaves `p` alone.
///
/// # Safety
/// As [`realloc`].
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: the caller's guarantee for p is realloc's.
        Some(total) => unsafe { realloc(p, total) },
        None => enomem(),
    }
}

/// Stores in `*memptr` a block of `size` bytes aligned to `align` and
/// returns 0. Returns `EINVAL` when `align` is not a power of two multiple
/// of `sizeof(void *)`, `ENOMEM` when no memory can be had (also setting
/// `errno`, as glibc does); `*memptr` is not written on error.
///
/// # Safety
/// `memptr` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(memptr: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !is_posix_alignment(align) {
        return libc::EINVAL;
    }
    let p = hakmem_core::alloc(size, align);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller guarantees memptr is valid for a write.
    unsafe { memptr.write(p.cast()) };
    0
}

/// `size` bytes aligned to `align`. glibc's rules: an alignment up to 16
/// is `malloc`'s, any other is rounded up to a power of two, and one above
/// `SIZE_MAX / 2 + 1` fails with `EINVAL`; no memory is `ENOMEM`.
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    match memalign_alignment(align) {
        Some(align) => hakmem_core::alloc(size, align).cast(),
        None => {
            set_errno(libc::EINVAL);
            ptr::null_mut()
        }
    }
}

/// C11's `aligned_alloc`. glibc 2.36 makes it an alias of `memalign`
/// (same address in libc.so.6): a non-power-of-two alignment is rounded up,
/// not refused, and the size need not be a multiple of the alignment.
/// (glibc 2.38 started refusing non-powers of two with `EINVAL`.)
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: memalign has no precondition.
    unsafe { memalign(align, size) }
}

/// `size` bytes aligned to the OS page (4 KiB).
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    hakmem_core::alloc(size, OS_PAGE_SIZE).cast()
}

/// `size` rounded up to whole OS pages, page-aligned; `ENOMEM` when the
/// rounding overflows. `pvalloc(0)` is a minimal page-aligned block, as in
/// glibc.
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    match pvalloc_size(size) {
        Some(size) => hakmem_core::alloc(size, OS_PAGE_SIZE).cast(),
        None => enomem(),
    }
}

/// The bytes block `p` can hold (at least what was asked for, exactly what
/// can be used); 0 for `NULL`. A bad pointer aborts (see [`free`]).
///
/// # Safety
/// `p` must be `NULL` or a live block from this library.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() || !is_live_block("malloc_usable_size", p) {
        return 0;
    }
    // SAFETY: p is a live hakmem block (checked above).
    unsafe { hakmem_core::usable_size(p.cast()) }
}

/// C23's `free_sized`: frees block `p` of `size` bytes (the size it was
/// allocated with by `malloc`, `calloc` or `realloc`); `free_sized(NULL, n)`
/// does nothing. This is [`free`], checks and diagnostics included: the size
/// is not needed and not checked (see the module's documentation).
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: usize) {
    // SAFETY: free_checked accepts any value.
    unsafe { hakmem_core::free_checked(p.cast()) }
}

/// C23's `free_aligned_sized`: frees block `p` allocated by
/// `aligned_alloc(align, size)`; `NULL` does nothing. `p` must be aligned to
/// `align`, rounded up as `aligned_alloc` rounds it (a pointer without that
/// alignment, or an alignment `aligned_alloc` refuses, is reported like a
/// bad pointer); then it is [`free`]. The size is not checked.
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, align: usize, _size: usize) {
    match memalign_alignment(align) {
        // SAFETY: free_checked accepts any value.
        Some(rounded) if (p as usize) & (rounded - 1) == 0 => unsafe { hakmem_core::free_checked(p.cast()) },
        _ => misaligned_free("free_aligned_sized", p, align),
    }
}

/// A free with an alignment (`free_aligned_sized`, C++'s aligned `operator
/// delete`) of a pointer that does not have it. `NULL` does nothing; a
/// pointer that is not a live block is reported as such
/// ([`is_live_block`]); a live block as an alignment mismatch —
/// `hakmem: <function>(): pointer not aligned to <align> (alignment
/// mismatch) 0x...` — after which the process aborts or, under
/// `HAKMEM_ON_ERROR=warn`, the call is ignored (the block is kept), as for
/// any other misuse.
#[cold]
#[inline(never)]
pub(crate) fn misaligned_free(function: &str, p: *mut c_void, align: usize) {
    if p.is_null() || !is_live_block(function, p) {
        return;
    }
    let mut line = Line::new();
    line.push(b"hakmem: ");
    line.push(function.as_bytes());
    line.push(b"(): pointer not aligned to ");
    line.push_usize(align);
    line.push(b" (alignment mismatch) ");
    line.push_hex(p as usize);
    line.push(b"\n");
    line.write();
    if hakmem_core::config().on_error == hakmem_core::OnError::Abort {
        // SAFETY: abort takes no arguments and does not return.
        unsafe { libc::abort() }
    }
}

/// The old SunOS name of `free` (glibc keeps it for binary compatibility).
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: the caller's guarantee is free's.
    unsafe { free(p) }
}

/// Gives free memory back to the OS now: collects the calling thread's
/// heap and purges everything free in it and in the global caches
/// (`hakmem_core::collect(true)`). Like glibc, returns 1 when memory was
/// released (hakmem made an `madvise` or `munmap` call), 0 otherwise.
/// `pad` is ignored: hakmem keeps no top-of-heap slack to pad.
///
/// # Safety
/// No precondition.
#[no_mangle]
pub unsafe extern "C" fn malloc_trim(_pad: usize) -> c_int {
    crate::collect_reporting_release(true)
}

// glibc's `__libc_*` names of the same functions (exported by libc.so.6 at
// GLIBC_2.2.5). Some programs and libraries call them directly to reach
// "the real malloc"; they must reach hakmem too, or a block would cross
// allocators. glibc 2.36 has no `__posix_memalign`, `__libc_aligned_alloc`
// or public `__libc_reallocarray`, so neither do we.

/// glibc's alias of [`malloc`].
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    // SAFETY: the caller's guarantee is malloc's.
    unsafe { malloc(size) }
}

/// glibc's alias of [`free`].
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: the caller's guarantee is free's.
    unsafe { free(p) }
}

/// glibc's alias of [`calloc`].
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_calloc(count: usize, size: usize) -> *mut c_void {
    // SAFETY: the caller's guarantee is calloc's.
    unsafe { calloc(count, size) }
}

/// glibc's alias of [`realloc`].
///
/// # Safety
/// As [`realloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the caller's guarantee is realloc's.
    unsafe { realloc(p, size) }
}

/// glibc's alias of [`memalign`].
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: the caller's guarantee is memalign's.
    unsafe { memalign(align, size) }
}

/// glibc's alias of [`valloc`].
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
    // SAFETY: the caller's guarantee is valloc's.
    unsafe { valloc(size) }
}

/// glibc's alias of [`pvalloc`].
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
    // SAFETY: the caller's guarantee is pvalloc's.
    unsafe { pvalloc(size) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posix_alignment_is_a_power_of_two_multiple_of_a_pointer() {
        for ok in [8, 16, 32, 4096, 1 << 22, 1 << 63] {
            assert!(is_posix_alignment(ok), "{ok}");
        }
        for bad in [0, 1, 2, 4, 12, 24, 48, 4095, (1 << 63) + 8, usize::MAX] {
            assert!(!is_posix_alignment(bad), "{bad}");
        }
    }

    #[test]
    fn memalign_rounds_alignment_up_like_glibc() {
        assert_eq!(memalign_alignment(0), Some(16));
        assert_eq!(memalign_alignment(1), Some(16));
        assert_eq!(memalign_alignment(3), Some(16));
        assert_eq!(memalign_alignment(16), Some(16));
        assert_eq!(memalign_alignment(17), Some(32));
        assert_eq!(memalign_alignment(24), Some(32));
        assert_eq!(memalign_alignment(100), Some(128));
        assert_eq!(memalign_alignment(4096), Some(4096));
        assert_eq!(memalign_alignment(1 << 63), Some(1 << 63));
        assert_eq!(memalign_alignment((1 << 63) + 1), None);
        assert_eq!(memalign_alignment(usize::MAX), None);
    }

    #[test]
    fn pvalloc_rounds_size_up_to_pages() {
        assert_eq!(pvalloc_size(0), Some(0));
        assert_eq!(pvalloc_size(1), Some(4096));
        assert_eq!(pvalloc_size(4096), Some(4096));
        assert_eq!(pvalloc_size(4097), Some(8192));
        assert_eq!(pvalloc_size(usize::MAX - 4094), None);
        assert_eq!(pvalloc_size(usize::MAX - 4095), Some(usize::MAX - 4095));
    }
}
